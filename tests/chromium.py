"""Headless Chromium for the HTML report (apt `chromium`; scripts/setup.sh --dev installs
it), driven over the DevTools protocol on a pipe (--remote-debugging-pipe: fd 3 carries
commands, fd 4 replies, each a JSON text ended by NUL; nothing but the standard library).
A page is opened at a given CSS width (device emulation: headless windows are at least
500 px wide, a phone is 390), every script error and console error is collected, the
probe (tests/integration/report_probe.js) is evaluated in the page, and full-page
screenshots are taken. Flags as MACHINE-NOTES.md says."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

PROBE = Path(__file__).resolve().parent / "integration" / "report_probe.js"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--remote-debugging-pipe",
)  # fmt: skip


def browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One browser with one page; a context manager that closes the browser."""

    def __init__(self, work: Path, timeout: float = 120) -> None:
        exe = browser()
        assert exe is not None, "chromium is not installed"
        cmd_r, self._cmd = os.pipe()
        self._resp, resp_w = os.pipe()

        def fds() -> None:  # the child's fd 3 reads commands, fd 4 writes replies
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (cmd_r, resp_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={work / 'profile'}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(3, 4),
            preexec_fn=fds, env=dict(os.environ, HOME=str(work)),
        )  # fmt: skip
        os.close(cmd_r)
        os.close(resp_w)
        self.timeout, self._id, self._buf = timeout, 0, b""
        self.events: list[dict[str, Any]] = []
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self._send("Target.attachToTarget", {"targetId": target,
                                                             "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def __enter__(self) -> Page:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, AssertionError):
            self._send("Browser.close", {})
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # the browser this object started, by its own handle
            self.proc.wait()
        os.close(self._cmd)
        os.close(self._resp)

    def _message(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([self._resp], [], [], left)[0], "chromium hung"
            chunk = os.read(self._resp, 1 << 20)
            assert chunk, "chromium closed the pipe"
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return dict(json.loads(raw))

    def _send(self, method: str, params: dict[str, Any], session: str | None = None
              ) -> dict[str, Any]:  # fmt: skip
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return dict(reply.get("result", {}))
            self.events.append(reply)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._send(method, params or {}, self.session)

    def wait_for(self, method: str) -> dict[str, Any]:
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            e = self._message()
            if e.get("method") == method:
                return e
            self.events.append(e)

    def open(self, url: str, width: int, height: int = 1000) -> float:
        """Load `url` in a viewport `width` CSS px wide (a phone's when narrow); the
        seconds from navigation to the load event, as the page measured them."""
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")
        nav = self.evaluate("performance.getEntriesByType('navigation')[0].toJSON()")
        return float(nav["loadEventStart"]) / 1000

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in res, res["exceptionDetails"]
        return res["result"].get("value")

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error/assert calls and error log entries so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(str(p["exceptionDetails"].get("exception", {}).get("description")
                               or p["exceptionDetails"].get("text")))  # fmt: skip
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in (
                    "error", "assert", "warning"):  # fmt: skip
                out.append(" ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif e.get("method") == "Log.entryAdded" and p["entry"]["level"] in ("error",
                                                                                  "warning"):
                out.append(f"{p['entry']['source']}: {p['entry']['text']}")
        return out

    def screenshot(self, shot: Path, width: int) -> None:
        """The whole page as a PNG, `width` CSS px wide."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        height = min(int(size["height"]) + 1, 12000)
        self.call("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
        png = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        shot.write_bytes(base64.b64decode(png))


def probe(page: Page) -> dict[str, Any]:
    """What tests/integration/report_probe.js sees in the open page."""
    return dict(page.evaluate(PROBE.read_text()))
