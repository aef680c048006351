"""The report in a real browser: headless Chromium (Debian's package; .ci/run installs it) opens
report.html; every image loads, nothing is fetched from outside the file, the page does not scroll
sideways, and the tables show what results.csv holds.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: JSON messages
ended by a NUL byte on file descriptors 3 and 4), so the test needs nothing beyond the standard
library; it records every request the page makes (Network.requestWillBeSent). Skipped where
chromium is absent.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import select
import shutil
import signal
import time
from pathlib import Path

import pytest

from experiments.config import experiment_from_dict
from experiments.plots import plot_results
from experiments.report import render_html
from experiments.runner import run_experiment
from sim.fileio import atomic_write_text

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--remote-debugging-pipe", "--window-size=1280,900")
TIMEOUT_S = 60.0
CHECK = """(async () => {
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  const table = document.querySelector('table#points');
  return {
    images: [...document.images].map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,
                                            height: i.naturalHeight, scheme: i.src.split(':')[0]})),
    head: [...table.tHead.rows[0].cells].map(c => c.textContent),
    rows: [...table.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent)),
    pre: [...document.querySelectorAll('pre')].map(p => p.textContent),
    efficiency: (t => t && {caption: t.caption ? t.caption.textContent : '',
                            head: [...t.tHead.rows[0].cells].map(c => c.textContent),
                            rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent)),
                            width: t.getBoundingClientRect().width,
                            box: t.parentElement.getBoundingClientRect().width})(document.querySelector('table#efficiency')),
    pageWidth: document.documentElement.scrollWidth, viewWidth: window.innerWidth,
    tableWidth: table.getBoundingClientRect().width, boxWidth: table.parentElement.getBoundingClientRect().width,
  };
})()"""


class DevTools:
    """A DevTools-protocol session with one headless Chromium over --remote-debugging-pipe."""

    def __init__(self, profile: Path):
        ends = [*os.pipe(), *os.pipe()]
        # above fd 9, so that duplicating them onto 3 and 4 never overwrites one of them first
        to_chrome, self._write, self._read, from_chrome = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in ends)
        for fd in ends:
            os.close(fd)
        actions = [(os.POSIX_SPAWN_DUP2, to_chrome, 3), (os.POSIX_SPAWN_DUP2, from_chrome, 4),
                   (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
        argv = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"]
        # its own session: closing it kills the renderer and helper processes with it
        self.pid = os.posix_spawn(CHROMIUM, argv, os.environ, file_actions=actions, setsid=True)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer = b""
        self._next = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._receive()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        while True:
            found = next((e for e in self.events if e.get("method") == method), None)
            if found:
                return found
            self.events.append(self._receive())

    def _receive(self) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError(f"no answer from chromium in {TIMEOUT_S} s")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._write, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)  # whatever of its session is left (renderer, helpers)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        os.close(self._write)
        os.close(self._read)


def open_page(url: str, profile: Path) -> tuple[dict, list[str]]:
    """What CHECK finds in the loaded page, and every URL the page requested."""
    tools = DevTools(profile)
    try:
        target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Network", "Page", "Runtime"):
            tools.send(f"{domain}.enable", session=session)
        tools.send("Page.navigate", {"url": url}, session=session)
        tools.wait_for("Page.loadEventFired")
        result = tools.send("Runtime.evaluate", {"expression": CHECK, "awaitPromise": True, "returnByValue": True},
                            session=session)
        requests = [e["params"]["request"]["url"] for e in tools.events if e.get("method") == "Network.requestWillBeSent"]
        return result["result"]["value"], requests
    finally:
        tools.close()


SWEEP = {"name": "browser", "workload": {"model": "resnet50"},
         "cluster": {"gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2"},
         "sweep": {"cluster.gpus": [1, 2, 4, 8, 16, 32], "cluster.inter_link": ["tcp_10gbe", "ib_edr"]}}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "browser"
    run_experiment(experiment_from_dict(SWEEP), out, jobs=1, progress=False, log=lambda _: None)
    plot_results(out)
    page = out / "report.html"
    atomic_write_text(page, render_html(out))
    profile = tmp_path_factory.mktemp("chromium-profile")
    return out, open_page(page.as_uri(), profile)


def test_every_image_loads_and_nothing_is_fetched_from_outside(report):
    out, (page, requests) = report
    assert len(page["images"]) == len(list((out / "plots").glob("*.png"))) >= 4
    for image in page["images"]:
        assert image["complete"] and image["width"] > 100 and image["height"] > 100, image
        assert image["scheme"] == "data", image  # embedded: the page is one file
    outside = [u for u in requests if not u.startswith(("file:", "data:", "about:"))]
    assert outside == [], outside


def test_the_page_does_not_scroll_sideways_and_the_table_fits(report):
    _, (page, _) = report
    assert page["pageWidth"] <= page["viewWidth"]
    assert page["tableWidth"] <= page["boxWidth"] + 1


def _csv_rows(out: Path) -> list[dict]:
    with (out / "results.csv").open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_points_table_shows_results_csv(report):
    out, (page, _) = report
    rows = _csv_rows(out)
    assert page["head"][:4] == ["source", "series", "GPUs", "iteration (ms)"]
    shown = {(r[1], int(r[2])): r for r in page["rows"]}
    assert len(shown) == len(page["rows"]) == len(rows)  # one line per point (one repetition each)
    for row in rows:
        cells = shown[(row["cluster.inter_link"], int(row["world_size"]))]
        assert cells[0] == row["source"]
        assert float(cells[3]) == pytest.approx(1e3 * float(row["iteration_time_s"]), abs=0.006)
        assert float(cells[4].replace(",", "")) == pytest.approx(float(row["throughput_samples_per_s"]), abs=0.6)
        assert float(cells[5]) == pytest.approx(float(row["speedup"]), abs=0.06)
        assert float(cells[6]) == pytest.approx(100 * float(row["scaling_efficiency"]), abs=0.06)


def test_the_efficiency_table_is_a_table_of_results_csv(report):
    """The headline table is an HTML table (it was a pandas text dump in a <pre>): a row per GPU
    count, a column per series, each cell results.csv's efficiency in %, fitting its box."""
    out, (page, _) = report
    table = page["efficiency"]
    assert table is not None and table["caption"].startswith("Scaling efficiency T1 / TN in %")
    assert table["head"] == ["GPUs", "tcp_10gbe", "ib_edr"]
    assert not any("world_size" in p for p in page["pre"])
    by_point = {(r["cluster.inter_link"], int(r["world_size"])): float(r["scaling_efficiency"]) for r in _csv_rows(out)}
    assert [int(cells[0]) for cells in table["rows"]] == [1, 2, 4, 8, 16, 32]
    for cells in table["rows"]:
        for link, value in zip(table["head"][1:], cells[1:], strict=True):
            assert float(value) == pytest.approx(100 * by_point[(link, int(cells[0]))], abs=0.06)
    assert table["width"] <= table["box"] + 1


def test_the_check_can_fail_an_outside_fetch_and_a_broken_image_are_seen(tmp_path):
    """The same checks on a page that breaks both rules (the network is closed: nothing leaves)."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><head><link rel="stylesheet" href="https://cdn.example.invalid/x.css">'
                    '</head><body><img alt="remote" src="http://example.invalid/plot.png">'
                    '<img alt="broken" src="data:image/png;base64,AAAA">'
                    '<table id="points"><thead><tr><th>a</th></tr></thead><tbody><tr><td>1</td></tr></tbody></table>'
                    '</body></html>')
    found, requests = open_page(page.as_uri(), tmp_path / "profile")
    assert any(u.startswith("http://example.invalid/") for u in requests)
    assert any(u.startswith("https://cdn.example.invalid/") for u in requests)
    assert all(image["width"] == 0 for image in found["images"])  # neither image loaded
