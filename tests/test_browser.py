"""The HTML report in a real browser: Debian's headless Chromium, driven over the DevTools
protocol on a pipe (--remote-debugging-pipe; Python's standard library only, no Node, no
websocket). The page of `layerscope profile resnet20 --runs 3 --html` is served from localhost
and must make no request but its own, log no console error, draw its charts, sort and filter
its table and show a tooltip on hover."""
from __future__ import annotations

import base64
import functools
import http.server
import io
import json
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time

import pytest

from tests.helpers import run_cli

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = name if os.path.isabs(name) and os.access(name, os.X_OK) else shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install -y chromium; "
                             ".ci/run installs it before the tests)")


class Browser:
    """Headless Chromium with the DevTools protocol on fds 3 (commands) and 4 (replies)."""

    def __init__(self, workdir: str):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds():  # in the child: the protocol's fixed descriptors, inheritable
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.log_path = os.path.join(workdir, "chromium.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--disable-extensions",
             "--disable-default-apps", "--mute-audio", "--remote-debugging-pipe",
             # any host but the local server fails to resolve: an external request fails loudly
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
             f"--user-data-dir={os.path.join(workdir, 'profile')}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def _recv(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_child], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("no reply from Chromium; see " + self.log_path)
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed the pipe; see " + self.log_path)
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._recv(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            self.events.append(self._recv(deadline))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # requests are recorded by the server, not printed
        pass


@pytest.fixture(scope="module")
def report_page():
    with tempfile.TemporaryDirectory(prefix="layerscope-browser-") as tmp:
        t0 = time.perf_counter()
        code, _, err = run_cli("profile", "resnet20", "--runs", "3", "--format", "json",
                               "-o", os.path.join(tmp, "r.json"),
                               "--html", os.path.join(tmp, "report.html"))
        assert code == 0, err
        profile_s = time.perf_counter() - t0
        requested: list[str] = []

        class Handler(_QuietHandler):
            def do_GET(self):
                requested.append(self.path)
                super().do_GET()

        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=tmp))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{server.server_address[1]}/report.html"
        browser = Browser(tmp)
        try:
            t1 = time.perf_counter()
            target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.call("Target.attachToTarget",
                                   {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Network", "Runtime", "Log"):
                browser.call(f"{domain}.enable", session=session)
            browser.call("Emulation.setDeviceMetricsOverride",
                         {"width": 1280, "height": 1600, "deviceScaleFactor": 1,
                          "mobile": False}, session)
            browser.call("Page.navigate", {"url": url}, session)
            browser.wait_for("Page.loadEventFired")
            page = {"browser": browser, "session": session, "url": url,
                    "requested": requested, "json": os.path.join(tmp, "r.json"),
                    "timings": {"profile_s": profile_s}}
            yield page
            page["timings"]["browser_s"] = time.perf_counter() - t1
        finally:
            browser.close()
            server.shutdown()
            server.server_close()


def js(page, expression: str):
    res = page["browser"].call("Runtime.evaluate",
                               {"expression": expression, "returnByValue": True,
                                "awaitPromise": True}, page["session"])
    if "exceptionDetails" in res:
        raise AssertionError(f"{expression}: {res['exceptionDetails']}")
    return res["result"].get("value")


@pytest.mark.integration
def test_no_request_but_the_page_and_no_console_error(report_page):
    assert js(report_page, "document.documentElement.getAttribute('data-ls-ready')") == "1"
    events = report_page["browser"].events
    urls = [e["params"]["request"]["url"] for e in events
            if e.get("method") == "Network.requestWillBeSent"]
    assert urls == [report_page["url"]], urls
    assert report_page["requested"] == ["/report.html"]
    failed = [e for e in events if e.get("method") == "Network.loadingFailed"]
    assert failed == []
    errors = [e["params"] for e in events
              if (e.get("method") == "Runtime.consoleAPICalled"
                  and e["params"]["type"] in ("error", "assert", "warning"))
              or e.get("method") == "Runtime.exceptionThrown"
              or (e.get("method") == "Log.entryAdded"
                  and e["params"]["entry"]["level"] in ("error", "warning"))]
    assert errors == []


@pytest.mark.integration
def test_charts_are_drawn(report_page):
    charts = js(report_page, """(() => Array.from(document.querySelectorAll('svg.ls-chart'))
        .map(s => { const r = s.getBoundingClientRect();
          return {id: s.dataset.chart, w: r.width, h: r.height,
                  marks: s.querySelectorAll('.ls-mark').length,
                  drawn: Array.from(s.querySelectorAll('rect.ls-mark, circle.ls-mark'))
                    .filter(m => { const b = m.getBBox(); return b.width > 0 && b.height > 0; })
                    .length}; }))()""")
    by_id = {c["id"]: c for c in charts}
    assert set(by_id) == {"latency", "roofline"}
    rows = json.load(open(report_page["json"]))["layers"]
    assert by_id["latency"]["marks"] == len(rows)
    assert by_id["roofline"]["marks"] >= 20  # resnet20's convolutions at least
    for c in charts:
        assert c["w"] > 600 and c["h"] > 250
        assert c["drawn"] >= c["marks"] * 0.8  # bars of (near) zero time may be flat


@pytest.mark.integration
def test_screenshot_is_not_blank(report_page):
    from PIL import Image

    box = js(report_page, """(() => { const r = document.querySelector('svg.ls-chart')
        .getBoundingClientRect(); return [r.x + scrollX, r.y + scrollY, r.width, r.height]; })()""")
    shot = report_page["browser"].call("Page.captureScreenshot", {"format": "png"},
                                       report_page["session"])
    with Image.open(io.BytesIO(base64.b64decode(shot["data"]))) as im:
        page = im.convert("RGB")
        assert len(set(page.getdata())) > 200, "the page looks blank"
        chart = page.crop(tuple(int(v) for v in (box[0], box[1], box[0] + box[2],
                                                 box[1] + box[3])))
        # axis, grid, text and one colour per layer type at least
        assert len(set(chart.getdata())) > 50, "the chart looks blank"


@pytest.mark.integration
def test_hover_shows_the_layers_tooltip(report_page):
    point = js(report_page, """(() => { const m = document.querySelector(
        'svg[data-chart="roofline"] circle.ls-mark'); m.scrollIntoView({block: 'center'});
        const r = m.getBoundingClientRect();
        return [r.x + r.width / 2, r.y + r.height / 2, m.dataset.tip]; })()""")
    x, y, tip = point
    report_page["browser"].call("Input.dispatchMouseEvent",
                                {"type": "mouseMoved", "x": x, "y": y}, report_page["session"])
    shown = js(report_page, """(() => { const t = document.getElementById('ls-tip');
        return [t.hidden, t.textContent]; })()""")
    assert shown[0] is False
    assert shown[1] == tip
    assert "→ out" in tip and "median" in tip and "of roof" in tip


@pytest.mark.integration
def test_table_sorts_on_header_click_and_filters(report_page):
    order = js(report_page, """(() => {
        const table = document.querySelector('table.ls-table');
        const heads = Array.from(table.tHead.rows[0].cells);
        const col = heads.findIndex(h => h.textContent === 'Median ms');
        heads[col].click();
        const first = Array.from(table.tBodies[0].rows).map(r => +r.cells[col].dataset.sort);
        heads[col].click();
        const second = Array.from(table.tBodies[0].rows).map(r => +r.cells[col].dataset.sort);
        return [first, second, heads[col].getAttribute('aria-sort')]; })()""")
    desc, asc, state = order
    assert desc == sorted(desc, reverse=True) and asc == sorted(asc) and state == "ascending"
    shown = js(report_page, """(() => {
        const input = document.querySelector('input.ls-filter');
        input.value = 'conv2d layer3';
        input.dispatchEvent(new Event('input'));
        const rows = Array.from(document.querySelector('table.ls-table').tBodies[0].rows);
        const visible = rows.filter(r => !r.hidden).map(r => r.cells[0].textContent + ' '
                                                         + r.cells[1].textContent);
        return [visible, document.getElementById(input.dataset.count).textContent]; })()""")
    visible, count = shown
    assert visible and all("layer3" in v and "Conv2d" in v for v in visible)
    assert count.startswith(f"{len(visible)} of ")


@pytest.mark.integration
def test_embedded_json_is_the_saved_result(report_page):
    embedded = js(report_page, "JSON.parse(document.querySelector('script.ls-json')"
                               ".textContent)")
    assert embedded == json.load(open(report_page["json"]))
