// pgsweep report: zoom and a readout for the per-second plots, and every section opened
// for printing. The page reads without it (tooltips are SVG <title>s). Data is read from
// <script type="application/json"> and written with textContent only, never as markup.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var AREA = 1000;

  function niceStep(span, count) {
    var raw = span / Math.max(count, 1);
    var mag = raw > 0 ? Math.pow(10, Math.floor(Math.log10(raw))) : 1;
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) { if (steps[i] * mag >= raw) return steps[i] * mag; }
    return 10 * mag;
  }

  function ticks(lo, hi, count) {
    var step = niceStep(hi - lo, count), out = [];
    for (var v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
      out.push(Math.round(v * 1e10) / 1e10);
    }
    return { values: out, step: step };
  }

  function fmt(v, step) {
    if (Math.abs(v) < step * 1e-6) v = 0;  // never "-0"
    var digits = step > 0 ? Math.max(0, -Math.floor(Math.log10(step))) : 0;
    while (digits < 4 && Math.abs(Number(step.toFixed(digits)) - step) > step * 1e-6) digits++;
    digits = Math.min(digits, 4);
    return v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  function el(name, attrs) {
    var node = document.createElementNS(SVG, name);
    for (var k in attrs) { node.setAttribute(k, attrs[k]); }
    return node;
  }

  function nearest(xs, x) {
    var lo = 0, hi = xs.length - 1;
    if (hi < 0) return -1;
    while (hi - lo > 1) { var mid = (lo + hi) >> 1; if (xs[mid] < x) lo = mid; else hi = mid; }
    return Math.abs(xs[lo] - x) <= Math.abs(xs[hi] - x) ? lo : hi;
  }

  function setup(plot) {
    var data = JSON.parse(plot.querySelector("script.plot-data").textContent);
    var area = plot.querySelector("svg.area");
    var axis = plot.querySelector("svg.x-axis");
    var vgrid = plot.querySelector("path.vgrid");
    var readout = plot.querySelector(".readout");
    var reset = plot.querySelector("button.reset");
    var x0 = data.x[0], x1 = data.x[1];
    var view = [x0, x1];
    var cursor = el("path", { "class": "cursor", d: "" });
    var select = el("rect", { "class": "select", x: 0, y: 0, width: 0, height: AREA });
    select.style.display = "none";
    area.appendChild(cursor);
    area.appendChild(select);

    function toArea(x) { return (x - x0) / (x1 - x0) * AREA; }
    function fromPointer(ev) {
      var box = area.getBoundingClientRect();
      var f = Math.min(1, Math.max(0, (ev.clientX - box.left) / Math.max(box.width, 1)));
      return view[0] + f * (view[1] - view[0]);
    }

    function draw() {
      var a = toArea(view[0]), b = toArea(view[1]);
      area.setAttribute("viewBox", a + " 0 " + Math.max(b - a, 1e-6) + " " + AREA);
      var width = area.getBoundingClientRect().width;
      var t = ticks(view[0], view[1], width > 0 ? Math.max(3, Math.min(8, Math.round(width / 90))) : 6);
      var d = "";
      while (axis.firstChild) axis.removeChild(axis.firstChild);
      t.values.forEach(function (v) {
        d += "M" + toArea(v) + " 0V" + AREA;
        var label = el("text", { x: ((v - view[0]) / (view[1] - view[0]) * 100) + "%", y: 12,
                                 "text-anchor": "middle" });
        label.textContent = fmt(v, t.step);
        axis.appendChild(label);
      });
      vgrid.setAttribute("d", d);
      if (reset) reset.hidden = view[0] === x0 && view[1] === x1;
      plot.setAttribute("data-view", fmt(view[0], 0.01) + " " + fmt(view[1], 0.01));
    }

    function show(x) {
      cursor.setAttribute("d", "M" + toArea(x) + " 0V" + AREA);
      while (readout.firstChild) readout.removeChild(readout.firstChild);
      var head = document.createElement("span");
      var at = null;
      data.series.forEach(function (s) {
        var i = nearest(s.x, x);
        if (i < 0 || s.y[i] === null) return;
        if (at === null) at = s.x[i];
        var item = document.createElement("span");
        item.style.color = s.colour;
        item.textContent = s.label + ": " + fmt(s.y[i], Math.abs(s.y[i]) >= 100 ? 1 : 0.01);
        readout.appendChild(item);
      });
      head.textContent = data.xlabel.split(" (")[0] + " " + (at === null ? "" : fmt(at, 1)) + " · " + data.ylabel + ":";
      readout.insertBefore(head, readout.firstChild);
    }

    var start = null;
    area.addEventListener("pointerdown", function (ev) {
      start = fromPointer(ev);
      try { area.setPointerCapture(ev.pointerId); } catch (e) { /* a pointer already gone */ }
    });
    area.addEventListener("pointermove", function (ev) {
      var x = fromPointer(ev);
      show(x);
      if (start !== null) {
        var a = toArea(Math.min(start, x)), b = toArea(Math.max(start, x));
        select.style.display = "";
        select.setAttribute("x", a);
        select.setAttribute("width", b - a);
      }
    });
    area.addEventListener("pointerup", function (ev) {
      if (start === null) return;
      var x = fromPointer(ev), lo = Math.min(start, x), hi = Math.max(start, x);
      start = null;
      select.style.display = "none";
      if (hi - lo > (view[1] - view[0]) / 100) { view = [lo, hi]; draw(); }
    });
    area.addEventListener("dblclick", function () { view = [x0, x1]; draw(); });
    if (reset) reset.addEventListener("click", function () { view = [x0, x1]; draw(); });
    draw();
    if (window.ResizeObserver) new ResizeObserver(function () { draw(); }).observe(area);
  }

  document.querySelectorAll(".xy.zoomable").forEach(setup);
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });
})();
