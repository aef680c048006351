"""Chrome / Perfetto trace of a simulated iteration (open it at ui.perfetto.dev or chrome://tracing)."""

from __future__ import annotations

from typing import Any

from sim.result import IterationResult


def chrome_trace(result: IterationResult, title: str = "scalebench") -> dict[str, Any]:
    """Trace Event Format: one complete ('X') event per span, microseconds, a thread per lane."""
    lanes: dict[str, int] = {}
    events: list[dict[str, Any]] = []
    for span in result.spans:
        tid = lanes.setdefault(span.lane, len(lanes))
        events.append({
            "name": span.name, "cat": span.lane.split("/")[-1], "ph": "X", "pid": 0, "tid": tid,
            "ts": span.start_s * 1e6, "dur": span.duration_s * 1e6,
        })
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": title}}]
    meta += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "args": {"name": lane}} for lane, tid in lanes.items()]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"iteration_time_s": result.iteration_time_s, "world_size": result.world_size}}
