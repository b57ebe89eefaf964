// Evaluated by tests/chromium.py in the loaded HTML report: opens every folded section,
// measures every plot as the browser laid it out, hovers and drags across the first
// zoomable plot, double-clicks it back, and returns what it saw.
(function () {
  var out = {};
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  out.viewport = window.innerWidth;
  out.scrollWidth = document.documentElement.scrollWidth;
  out.plots = [];
  document.querySelectorAll("figure.plot").forEach(function (fig) {
    var marks = fig.querySelectorAll("circle, path.line, path.dot, line, rect");
    var drawn = 0;
    marks.forEach(function (m) {
      var b = m.getBoundingClientRect();
      if (b.width > 0 || b.height > 0) drawn++;
    });
    var box = fig.getBoundingClientRect();
    out.plots.push({ name: fig.getAttribute("data-plot"), svgs: fig.querySelectorAll("svg").length,
                     marks: marks.length, drawn: drawn, width: box.width, height: box.height,
                     titles: fig.querySelectorAll("title").length, right: box.right });
  });
  var z = document.querySelector(".xy.zoomable");
  if (z) {
    var area = z.querySelector("svg.area"), b = area.getBoundingClientRect();
    var at = function (f) {
      return { clientX: b.left + f * b.width, clientY: b.top + b.height / 2, bubbles: true,
               pointerId: 1 };
    };
    var labels = function () {
      return Array.prototype.map.call(z.querySelectorAll(".x-axis text"),
                                      function (t) { return t.textContent; });
    };
    out.zoom = { before: z.getAttribute("data-view"), labelsBefore: labels() };
    area.dispatchEvent(new PointerEvent("pointermove", at(0.5)));
    out.zoom.readout = z.querySelector(".readout").textContent;
    area.dispatchEvent(new PointerEvent("pointerdown", at(0.25)));
    area.dispatchEvent(new PointerEvent("pointermove", at(0.5)));
    area.dispatchEvent(new PointerEvent("pointerup", at(0.5)));
    out.zoom.after = z.getAttribute("data-view");
    out.zoom.labelsAfter = labels();
    out.zoom.viewBox = area.getAttribute("viewBox");
    area.dispatchEvent(new MouseEvent("dblclick", { bubbles: true }));
    out.zoom.reset = z.getAttribute("data-view");
  }
  return out;
})()
