"""Timelines side by side: ``scalebench plot --timeline SIM.json MEASURED.json`` draws iterations
written by ``simulate --trace`` and ``real --trace`` (sim/trace.py's format), or by torch.profiler
(``prof.export_chrome_trace``: one profiler step of it, real/kineto.py ``profiler_timeline``), one
above the other, on one time axis, a row per rank and stream."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.plot_style import save_figure  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

CATEGORIES = (  # (label, color, hatch, test on the span's name)
    ("forward", "#4c72b0", "", lambda n: n.startswith(("fwd", "forward")) or bool(re.fullmatch(r"F\d+", n))),
    ("backward + parameter-server push/pull", "#55a868", "//", lambda n: n.startswith("backward + PS")),
    ("backward", "#55a868", "", lambda n: n.startswith(("bwd", "backward")) or bool(re.fullmatch(r"B\d+", n))),
    ("optimizer step", "#c49c2a", "", lambda n: n.startswith("optimizer")),
    ("parameter-server push/pull", "#8172b3", "", lambda n: n.startswith("PS push/pull")),
    ("gradient allreduce", "#dd5555", "", lambda n: "allreduce" in n or n.startswith(("bucket", "dp gradient sync"))),
    ("compression codec", "#999999", "", lambda n: n.split()[0] in ("encode", "decode", "sum")),
)
OTHER = ("other", "#cccccc", "")


def load_trace(path: str | Path) -> dict[str, Any]:
    """A timeline file; a one-line error for anything that is not one."""
    from sim.fileio import read_input_bytes

    raw = read_input_bytes("--timeline", path, what="a timeline JSON from simulate --trace or real --trace")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ConfigError("--timeline", str(path), f"a timeline JSON from simulate --trace or real --trace "
                          f"({getattr(err, 'strerror', None) or type(err).__name__})") from None
    from real.kineto import is_profiler_trace, profiler_timeline

    if is_profiler_trace(data):
        return profiler_timeline(data, Path(path).name)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ConfigError("--timeline", str(path), "a Chrome trace object with traceEvents (simulate --trace, real "
                          "--trace or torch.profiler's export_chrome_trace)")
    return data


def check_spans(path: str | Path, doc: dict[str, Any]) -> dict[str, Any]:
    """A timeline to draw: at least one span ("ph": "X"), each with a process and thread id and a
    finite start and non-negative duration in microseconds; a one-line error naming the file and the
    event otherwise (issue 29: no events ended in a numpy traceback, NaN timestamps drew nothing)."""
    import math

    spans = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    if not spans:
        raise ConfigError("--timeline", str(path), "a timeline with at least one span (an event with \"ph\": \"X\"); "
                          "this one has none")
    for i, e in enumerate(spans):
        for key, least in (("ts", -math.inf), ("dur", 0.0)):
            value = e.get(key, 0.0 if key == "dur" else None)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < least:
                raise ConfigError(f"--timeline {path} span {i} ({str(e.get('name', ''))[:40]!r}) {key}", value,
                                  "a finite number of microseconds" + (" >= 0" if key == "dur" else ""))
        for key in ("pid", "tid"):
            if isinstance(e.get(key), bool) or not isinstance(e.get(key), (int, str)):
                raise ConfigError(f"--timeline {path} span {i} ({str(e.get('name', ''))[:40]!r}) {key}", e.get(key),
                                  "a process or thread id (a number or a name)")
    return doc


def _category(name: str, phase: str | None = None) -> tuple[str, str, str]:
    """A span's category: the phase a converted profiler trace names (real/kineto.py), else by
    the span's name as sim/trace.py and real/phases.py write them."""
    for label, color, hatch, _ in CATEGORIES:
        if phase == label:
            return label, color, hatch
    for label, color, hatch, test in CATEGORIES:
        if test(name):
            return label, color, hatch
    return OTHER


def _id_order(key: tuple[Any, Any]) -> tuple[tuple[int, Any], ...]:
    """Process and thread ids in order, numbers before names (a Chrome trace may mix them:
    Kineto's 'Spans' beside integer pids; sorting them together raised TypeError)."""
    return tuple((0, x) if isinstance(x, (int, float)) and not isinstance(x, bool) else (1, str(x)) for x in key)


def _rows(doc: dict[str, Any]) -> tuple[list[tuple[int, int]], dict[tuple[int, int], str]]:
    events = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    keys = sorted({(e["pid"], e["tid"]) for e in events if e.get("ph") == "X"}, key=_id_order)
    title = doc.get("otherData", {}).get("title", "")
    labels = {}
    for pid, tid in keys:
        proc = procs.get(pid, f"process {pid}").removeprefix(f"{title}: ")
        labels[(pid, tid)] = f"{proc}, {threads.get((pid, tid), tid)}".replace(" (stands for all", "\n(stands for all")
    return keys, labels


def plot_timelines(paths: list[str | Path], stem: Path) -> list[Path]:
    """One panel per timeline, top to bottom in the order given, on a shared time axis (ms)."""
    docs = [check_spans(p, load_trace(p)) for p in paths]
    layouts = [_rows(doc) for doc in docs]
    heights = [max(1, len(keys)) for keys, _ in layouts]
    fig, axes = plt.subplots(len(docs), 1, sharex=True, squeeze=False, figsize=(11, 1.4 + 0.55 * sum(heights) + 0.9 * len(docs)),
                             gridspec_kw={"height_ratios": heights})
    seen: dict[str, Any] = {}
    for ax, doc, (keys, labels), path in zip(axes[:, 0], docs, layouts, paths, strict=True):
        y_of = {key: i for i, key in enumerate(keys)}
        for e in doc["traceEvents"]:
            if e.get("ph") != "X":
                continue
            label, color, hatch = _category(str(e.get("name", "")), (e.get("args") or {}).get("phase"))
            bar = ax.barh(y_of[(e["pid"], e["tid"])], e.get("dur", 0) / 1e3, left=e["ts"] / 1e3, height=0.6, color=color,
                          hatch=hatch, edgecolor="white", linewidth=0.3)
            seen.setdefault(label, bar)
        ax.set_yticks(range(len(keys)))
        ax.set_yticklabels([labels[k] for k in keys], fontsize=8)
        ax.set_ylim(len(keys) - 0.5, -0.5)
        ax.grid(True, axis="x", alpha=0.3)
        other = doc.get("otherData", {})
        source = {"sim": "simulated", "real": "measured"}.get(other.get("source"), other.get("source", "timeline"))
        it = other.get("iteration_time_s")
        length = f", iteration {it * 1e3:.1f} ms" if isinstance(it, (int, float)) else ""
        limits = textwrap.fill(str(other.get("limits", "")), 120)
        ax.set_title(f"{source}: {other.get('title', Path(path).name)}{length}\n{limits}", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("time since the iteration started (ms)")
    order = [label for label, *_ in (*CATEGORIES, OTHER) if label in seen]
    fig.legend([seen[label] for label in order], order, loc="lower center", ncol=min(4, len(order)), fontsize=8,
               bbox_to_anchor=(0.5, -0.02), frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return save_figure(fig, stem)
