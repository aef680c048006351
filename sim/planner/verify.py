"""Checking a plan: its best candidates through ``sim.simulate.simulate`` (the scenario built
and validated as ``scalebench simulate`` builds it), on the fast path and in detailed mode.

- ``confirm``: the top candidates re-simulated on the fast path must give the planner's numbers
  (the planner caches and replays; this is the check that it changed nothing). A difference is
  a bug, raised, never printed as a result.
- ``verify``: the top candidates in detailed mode (every rank's communication per flow; a
  pipeline's replica 0 rank by rank and every replica's DP rings, at any size). The detailed mode
  refuses what it does not model (trees, NVLS, placed parameter servers, the strategy fields
  sim.engine.detailed_scope does not list): those are 'not verifiable', with its reason. The
  ranking holds when the verifiable candidates keep their order.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.planner.search import Candidate, PlanResult
from sim.result import IterationResult
from sim.simulate import simulate

CONFIRM_REL = 1e-9
"""The planner's figures and simulate()'s agree bit for bit in the tests; this is the margin the
runtime check allows before calling it a bug."""
FIELDS = ("iteration_time_s", "compute_time_s", "exposed_comm_time_s", "bubble_time_s", "codec_time_s",
          "tp_comm_time_s", "pp_comm_time_s", "comm_time_s", "memory_bytes", "model_comm_time_s", "recompute_time_s",
          "overlap_slowdown_time_s", "straggler_wait_time_s")


def scenario_of(result: PlanResult, c: Candidate, fidelity: str = "fast"):
    spec = c.spec(result.request)
    spec["simulation"] = {"fidelity": fidelity}
    return scenario_from_dict(spec, result.request.catalog)


def confirm(result: PlanResult, k: int) -> list[IterationResult]:
    """simulate() of the top ``k`` distinct candidates; RuntimeError if any figure differs."""
    out = []
    for c, _ in result.distinct(k):
        sim = simulate(scenario_of(result, c))
        assert c.outcome is not None
        for name in FIELDS:
            a, b = getattr(c.outcome, name), getattr(sim, name)
            if abs(a - b) > CONFIRM_REL * max(abs(a), abs(b), 1e-30):
                raise RuntimeError(f"planner and simulate() disagree on {name} of {c.label()}: {a!r} vs {b!r}")
        out.append(sim)
    return out


@dataclass(frozen=True)
class Verified:
    candidate: Candidate
    rank: int
    fast_s: float
    detailed_s: float | None
    reason: str = ""
    """Why the detailed mode refused it (empty when verified)."""

    @property
    def difference(self) -> float | None:
        return None if self.detailed_s is None else self.detailed_s / self.fast_s - 1.0


@dataclass(frozen=True)
class Verification:
    rows: list[Verified]
    holds: bool
    summary: str


def verify(result: PlanResult, k: int) -> Verification:
    rows = []
    for rank, (c, _) in enumerate(result.distinct(k), start=1):
        assert c.outcome is not None
        try:
            detailed = simulate(scenario_of(result, c, "detailed"))
        except ConfigError as err:
            rows.append(Verified(c, rank, c.outcome.iteration_time_s, None, f"not verifiable: {err}"))
            continue
        rows.append(Verified(c, rank, c.outcome.iteration_time_s, detailed.iteration_time_s))
    return _judge(result, rows)


def _judge(result: PlanResult, rows: list[Verified]) -> Verification:
    objective = result.request.objective
    checked = [v for v in rows if v.detailed_s is not None]
    refused = len(rows) - len(checked)
    refused_text = f"; {refused} not verifiable (the detailed mode's reasons above)" if refused else ""
    if len(checked) < 2:
        return Verification(rows, True, f"{len(checked)} of {len(rows)} verifiable: no order to check{refused_text}")

    def detailed_value(v: Verified) -> float:
        """The objective with the detailed iteration time in place of the fast one."""
        assert v.detailed_s is not None and v.candidate.outcome is not None
        return v.candidate.objective_value(objective) * v.detailed_s / v.candidate.outcome.iteration_time_s

    # equal to 9 significant digits is a tie (the same schedule reached by two float paths), kept in rank order
    order = sorted(checked, key=lambda v: (float(f"{detailed_value(v):.9g}"), v.rank))
    holds = [v.rank for v in order] == [v.rank for v in checked]
    worst = max(abs(v.difference or 0.0) for v in checked)
    if holds:
        text = (f"the ranking holds: the {len(checked)} verifiable candidates keep their order in detailed mode "
                f"(fast vs detailed within {100 * worst:.2g} %){refused_text}")
    else:
        text = (f"the ranking changes in detailed mode: its order is {', '.join(f'#{v.rank}' for v in order)} "
                f"(fast vs detailed up to {100 * worst:.2g} %){refused_text}")
    return Verification(rows, holds, text)
