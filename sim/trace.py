"""Chrome / Perfetto timelines of one training iteration, simulated or measured, in one format.

Open them at ui.perfetto.dev or chrome://tracing; ``scalebench plot --timeline SIM.json
MEASURED.json`` draws two of them one above the other. Trace Event Format (JSON object):
- one process per rank, pid = rank + 1, named ``<scenario>: rank r`` (pid 0 stays free: some
  viewers treat it as the system); threads are lanes: tid 1 compute, 2 communication, 3 sends;
- every span is a complete event (``ph: X``, microseconds from the iteration's start) with
  ``args``: a layer's kind, parameters and FLOPs for its batch; a bucket's bytes, its layers
  (count, first, last), the algorithm and the link it crosses; the optimizer and its parameters;
- a flow (``ph: s`` -> ``ph: f``, cat ``bucket``) runs from a bucket's ready time (its last
  gradient, on the compute lane) to the start of its reduction (on the communication lane), so
  a viewer draws the wait between them as an arrow;
- ``otherData`` holds the iteration time, the world size, the source (sim or real), the scenario
  and ``limits``: what the timeline leaves out, in words; detailed runs add ``hottest_links``, and
  each traced bucket's ``delayed by`` arg names its slowest flow and the link that held it.
Parameter-server reductions are named as such (``PS push/pull bucket i``), not allreduces.

Limits of simulated timelines: the fast fidelity simulates identical ranks once, so its one
process stands for every rank (its name says so); the detailed fidelity records the first
``sim.engine.detailed.TRACED_RANKS`` ranks; a pipeline's fast path shows one process per stage
(standing for that stage's data- and tensor-parallel ranks); a run of several iterations
(``--iterations``) has no timeline. Measured timelines are described in ``real/phases.py``.
"""

from __future__ import annotations

import re
from typing import Any

LANE_TIDS = {"compute": 1, "comm": 2, "send": 3}
LANE_NAMES = {"compute": "compute stream", "comm": "communication stream", "send": "pipeline sends"}
FAST_LIMIT = "fast fidelity: one simulated rank stands for all {n} identical ranks"
DETAILED_LIMIT = "detailed fidelity: every rank simulated, the first {k} of {n} recorded"
PIPELINE_LIMIT = "pipeline, fast fidelity: one process per stage, standing for its data- and tensor-parallel ranks"
Span = dict[str, Any]
"""``{"lane", "name", "start_s", "end_s", "args"}`` (args optional): one interval of one rank."""
Flow = tuple[int, float, int, float, str]
"""(pid, time on the compute lane, pid, time on the communication lane, name) in seconds."""


def trace_document(title: str, processes: list[tuple[int, str, list[Span]]], flows: list[Flow],
                   other: dict[str, Any]) -> dict[str, Any]:
    """The JSON object of a timeline: ``processes`` are (pid, name, spans); lanes map to tids."""
    events: list[dict[str, Any]] = []
    meta: list[dict[str, Any]] = []
    for pid, name, spans in processes:
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"{title}: {name}"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        lanes: dict[str, int] = {}
        for span in spans:
            lane = span["lane"]
            tid = lanes.setdefault(lane, LANE_TIDS.get(lane, 10 + len(lanes)))
            events.append({
                "name": span["name"], "cat": lane, "ph": "X", "pid": pid, "tid": tid,
                "ts": span["start_s"] * 1e6, "dur": max(0.0, span["end_s"] - span["start_s"]) * 1e6,
                "args": {**span.get("args", {}), "lane": LANE_NAMES.get(lane, lane)},
            })
        for lane, tid in lanes.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": LANE_NAMES.get(lane, lane)}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for i, (pid_from, t_from, pid_to, t_to, name) in enumerate(flows):
        # 's' binds to the slice enclosing its time (the bucket's last backward layer, so a hair
        # before its end); 'f' with bp=e to the slice enclosing its time (the reduction's start).
        events.append({"name": name, "cat": "bucket", "ph": "s", "id": i + 1, "pid": pid_from, "tid": LANE_TIDS["compute"],
                       "ts": t_from * 1e6 - 1e-3})
        events.append({"name": name, "cat": "bucket", "ph": "f", "bp": "e", "id": i + 1, "pid": pid_to,
                       "tid": LANE_TIDS["comm"], "ts": t_to * 1e6 + 1e-3})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": {"title": title, **other}}


# -- simulated iterations ----------------------------------------------------------------------

_RANK_LANE = re.compile(r"^(rank|stage)(\d+)(?:/(.+))?$")


def chrome_trace(result, scenario) -> dict[str, Any]:
    """A simulated iteration (``sim.result.IterationResult`` of ``scenario``) as a timeline."""
    n, strategy = result.world_size, scenario.strategy
    by_pid: dict[int, list[Span]] = {}
    names: dict[int, str] = {}
    args_for = _SpanArgs(result, scenario)
    for span in result.spans:
        match = _RANK_LANE.match(span.lane)
        if match:
            index, lane = int(match.group(2)), match.group(3) or "compute"
            if match.group(1) == "stage":
                names[index + 1] = f"pipeline stage {index}"
            else:
                names[index + 1] = f"rank {index}"
        else:
            index, lane = 0, span.lane
            names[1] = "rank 0" if n == 1 else f"rank 0 (stands for all {n} identical ranks)"
        name, args = args_for(span.name, lane)
        if getattr(span, "detail", ""):
            args = {**args, "delayed by": span.detail}
        by_pid.setdefault(index + 1, []).append(
            {"lane": lane, "name": name, "start_s": span.start_s, "end_s": span.end_s, "args": args})
    flows = [(1, b.ready_s, 1, b.start_s, _bucket_name(strategy, b.index)) for b in result.buckets] if 1 in by_pid else []
    if any(_RANK_LANE.match(s.lane) and s.lane.startswith("stage") for s in result.spans):
        limit = PIPELINE_LIMIT
    elif result.fidelity == "detailed":
        from sim.engine.detailed import TRACED_RANKS

        limit = DETAILED_LIMIT.format(k=min(TRACED_RANKS, n), n=n)
    else:
        limit = FAST_LIMIT.format(n=n)
    other = {"source": "sim", "scenario": scenario.name, "iteration_time_s": result.iteration_time_s,
             "world_size": n, "fidelity": result.fidelity,
             "limits": limit + "; flows from a bucket's last gradient to its reduction on rank 0 only; times simulated"}
    links = getattr(result, "links", ())
    if links:  # the detailed mode's busiest links (sim.result.LinkStat)
        other["hottest_links"] = [
            {"link": s.name, "tier": s.tier, "busy_s": s.busy_s, "bytes": s.bytes, "capacity_Bps": s.capacity_Bps,
             "utilisation": s.utilisation(result.iteration_time_s), "busy_share": s.busy_share(result.iteration_time_s)}
            for s in result.hottest_links(10)]
    return trace_document(scenario.name, [(pid, names[pid], by_pid[pid]) for pid in sorted(by_pid)], flows, other)


def _bucket_name(strategy, index: int) -> str:
    return f"PS push/pull bucket {index}" if strategy.collective == "ps" else f"allreduce bucket {index}"


class _SpanArgs:
    """(name, args) of a simulated span from what the scenario and the result know about it."""

    def __init__(self, result, scenario):
        self.workload, self.strategy, self.cluster = scenario.workload, scenario.strategy, scenario.cluster
        self.layers = {layer.name: layer for layer in scenario.workload.layers}
        self.buckets = {b.index: b for b in result.buckets}
        cluster = scenario.cluster
        self.link = (cluster.inter_link if cluster.nodes > 1 else cluster.intra_link).name
        s = self.strategy
        self.algorithm = (f"parameter server ({s.ps_servers} server{'s' if s.ps_servers > 1 else ''}, {s.ps_mode})"
                          if s.collective == "ps" else f"{s.backend or ''} {s.collective} allreduce".strip())

    def __call__(self, name: str, lane: str) -> tuple[str, dict[str, Any]]:
        head, _, rest = name.partition(" ")
        batch = self.workload.batch_size
        if head in ("fwd", "bwd") and rest in self.layers:
            layer = self.layers[rest]
            flops = (layer.fwd_flops if head == "fwd" else layer.bwd_flops) * batch
            return name, {"layer": rest, "kind": layer.kind, "params": layer.param_count, "flops": flops,
                          "batch": batch, "time_from": "measured" if layer.fwd_time_s is not None else "roofline"}
        if head == "bucket" and rest.isdigit() and int(rest) in self.buckets:
            b = self.buckets[int(rest)]
            return _bucket_name(self.strategy, b.index), self._bucket_args(b)
        if head == "encode" and rest.startswith("bucket"):
            return name, {"codec": self.strategy.codec or self.strategy.precision}
        if name == "optimizer step":
            return name, {"optimizer": self.workload.optimizer, "params": self.workload.param_count}
        if re.fullmatch(r"[FB]\d+", name):
            return name, {"pass": "forward" if name[0] == "F" else "backward", "micro_batch": int(name[1:]),
                          "micro_batches": self.strategy.micro_batches}
        if lane == "comm":
            return name, {"algorithm": self.algorithm, "link": self.link}
        return name, {}

    def _bucket_args(self, b) -> dict[str, Any]:
        names = [layer.name for layer in self.workload.layers]
        lo, hi = sorted((names.index(b.first_layer), names.index(b.last_layer))) if b.first_layer in names else (0, -1)
        return {"bytes": b.n_bytes, "layers": hi - lo + 1, "first_layer": b.first_layer, "last_layer": b.last_layer,
                "algorithm": self.algorithm, "link": self.link, "ready_ms": b.ready_s * 1e3,
                "waited_ms": (b.start_s - b.ready_s) * 1e3}
