"""Where a predicted iteration goes, term by term, beside a measurement (``scalebench explain``).

Pure: an ``IterationResult`` in, a list of terms out, whose sum is the predicted iteration time
(tests/test_explain.py). Categories, in the order a reader follows an iteration:

- compute: forward, backward, optimizer step of one rank with nothing waiting;
- compute slowed by overlap: what collectives running beside compute took from it
  (sim.costs.contention);
- exposed communication: the reductions backward did not hide, by term (``IterationResult.
  exposed_comm_terms``: latency, bandwidth, codec, fusion copy), and tensor-parallel allreduces
  on the critical path;
- coordination: what frameworks spend synchronising ranks beyond the collectives themselves
  (a bucket held back until Horovod's cycle tick, a per-iteration overhead). A framework model
  that adds such a cost names it as a term of ``exposed_comm_terms`` (or of the per-iteration
  overhead) and lists its name in ``TERM_CATEGORIES`` as coordination: explain then shows it here;
- waiting for stragglers: the slowest rank's extra time (sim.costs.stragglers);
- pipeline bubble;
- waiting for input: what the node's input pipeline adds beyond the GPUs' timeline
  (sim/costs/input_pipeline.py; 0 with synthetic data).

The residual (measured - predicted) is what no term explains: the quantity to shrink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.result import IterationResult

CATEGORIES = ("compute", "compute slowed by overlap", "exposed communication", "coordination",
              "waiting for stragglers", "pipeline bubble", "waiting for input")

TERM_CATEGORIES: dict[str, str] = {
    "latency": "exposed communication",
    "bandwidth": "exposed communication",
    "codec": "exposed communication",
    "fusion copy": "exposed communication",
    "tensor-parallel allreduce": "exposed communication",
    "waiting for release": "coordination",
    "framework per-iteration overhead": "coordination",
}
"""Which category an exposed-communication term belongs to; a term not listed counts as
exposed communication. Framework models add their coordination terms here."""


@dataclass(frozen=True)
class Term:
    category: str
    name: str
    seconds: float


def breakdown(result: IterationResult) -> list[Term]:
    """The predicted iteration as terms (category, name, seconds) that sum to its time."""
    tp = result.tp_comm_time_s
    # the pipeline engine's passes hold their TP collectives and the other model-parallel
    # communication not hidden (ring attention's sends, all-to-alls, ZeRO-3's gathers and copies):
    # taken as half in each pass, each its own term
    model = result.model_comm_time_s
    forward = max(0.0, result.forward_time_s - tp / 2 - model / 2)
    backward = max(0.0, result.backward_time_s - tp / 2 - model / 2)
    overhead = max(0.0, result.compute_time_s - result.forward_time_s - result.backward_time_s - result.optimizer_time_s)
    terms = [Term("compute", "forward", forward), Term("compute", "backward", backward),
             Term("compute", "optimizer step", result.optimizer_time_s),
             Term("compute slowed by overlap", "SMs and memory bandwidth taken by collectives", result.overlap_slowdown_time_s)]
    if tp > 0:
        terms.append(Term("exposed communication", "tensor-parallel allreduce", tp))
    if model > 0:
        terms.append(Term("exposed communication", "context/expert/ZeRO-3 communication not hidden", model))
    exposed = result.exposed_comm_time_s
    attributed = sum(result.exposed_comm_terms.values())
    if result.exposed_comm_terms and abs(attributed - exposed) <= 1e-9 * max(1.0, exposed) + 1e-12:
        for name, seconds in sorted(result.exposed_comm_terms.items(), key=lambda kv: -kv[1]):
            terms.append(Term(TERM_CATEGORIES.get(name, "exposed communication"), name, seconds))
    elif exposed > 0:
        terms.append(Term("exposed communication", "not attributed by this engine", exposed))
    if overhead > 1e-9 * max(result.compute_time_s, 1e-30):
        terms.append(Term("coordination", "framework per-iteration overhead", overhead))
    terms.append(Term("waiting for stragglers", f"slowest of {result.world_size} ranks (compute x{result.straggler_scale:.4f})",
                      result.straggler_wait_time_s))
    terms.append(Term("pipeline bubble", "idle inside the pipeline schedule", result.bubble_time_s))
    terms.append(Term("waiting for input", "the host's input pipeline beyond the GPUs' timeline", result.data_wait_time_s))
    return terms


def category_totals(terms: list[Term]) -> dict[str, float]:
    totals = {c: 0.0 for c in CATEGORIES}
    for t in terms:
        totals[t.category] = totals.get(t.category, 0.0) + t.seconds
    return totals


@dataclass(frozen=True)
class Explanation:
    """A prediction's terms beside a measurement."""

    terms: list[Term]
    predicted_s: float
    measured_s: float | None = None

    @property
    def residual_s(self) -> float | None:
        """measured - predicted: positive where the real run is slower than every term explains."""
        return None if self.measured_s is None else self.measured_s - self.predicted_s

    @property
    def residual_percent(self) -> float | None:
        """The residual as a percentage of the measured time."""
        if self.measured_s is None or self.measured_s <= 0:
            return None
        return 100.0 * (self.measured_s - self.predicted_s) / self.measured_s

    def totals(self) -> dict[str, float]:
        return category_totals(self.terms)

    def as_dict(self) -> dict[str, Any]:
        p = self.predicted_s
        return {
            "terms": [{"category": t.category, "term": t.name, "seconds": t.seconds,
                       "share_of_predicted": t.seconds / p if p > 0 else 0.0} for t in self.terms],
            "categories": self.totals(),
            "predicted_iteration_s": p,
            "measured_iteration_s": self.measured_s,
            "residual_s": self.residual_s,
            "residual_percent_of_measured": self.residual_percent,
        }


def explain(result: IterationResult, measured_s: float | None = None) -> Explanation:
    return Explanation(breakdown(result), result.iteration_time_s, measured_s)
