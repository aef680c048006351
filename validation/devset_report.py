"""The development set's report: every group against its naive floor and its targets.

For each group of predictions (``validation.devset.Prediction``) it prints the model's error,
the signed median (efficiency groups: is the model optimistic?), the naive floor computed here
beside the README's own figure where the README gives one, every target of issue 26 with its
status (met / missed), and the worst row; then a verdict that counts the targets met. The run
fails (exit 1) where a gated group is worse than its floor, except the groups CI tolerates by
name (``KNOWN_GAPS``: each printed as a failure with its reason).

The floors. The scorer computes each floor from the README's formula on the README's rows, and
the test suite checks it against the README's table (tests/test_devset_and_cli.py). Where the
two differ the report says why (``FLOOR_NOTES``):
- tc p2p gloo: the README's 7.8 % is the MAPE over the 6 rows with both a delay and a rate; the
  group holds all 12 rows with a rate (4.5 %). Both are printed; the group is judged on its 12.
- Horovod InceptionV3 / ResNet-101: the README's 2.2 / 4.4 and 4.6 / 7.5 pp are not reproducible
  from the inputs the README states (its gradient bytes and one-GPU times are not given); the
  scorer uses the zoo's parameter counts (TensorFlow's: 23.8 M and 44.5 M) and each GPU count's
  ideal bar: 2.2 / 3.8 and 5.8 / 7.9 pp. A group is judged against the stricter of the two.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

Metric = Callable[[list], tuple[bool, str]]

README_FLOORS = {  # validation/devset/README.md, 'What a 20-line model gets on these rows'
    "tc allreduce nccl": ("MAPE", 6.2), "tc allreduce gloo": ("MAPE", 37.8), "tc p2p nccl": ("MAPE", 0.8),
    "tc p2p gloo": ("MAPE", 7.8), "horovod InceptionV3": ("median/worst", (2.2, 4.4)),
    "horovod ResNet-101": ("median/worst", (4.6, 7.5)),
}
FLOOR_NOTES = {
    "tc p2p gloo": "over its 6 rows with a delay and a rate",
    "horovod InceptionV3": "inputs not stated; judged on the stricter",
    "horovod ResNet-101": "inputs not stated; judged on the stricter",
}


def _mape(preds) -> float:
    return statistics.mean(abs(p.error()) for p in preds)


def _abs_pp(preds) -> list[float]:
    return [abs(p.error()) for p in preds]


def mape_at_most(limit: float) -> Metric:
    def check(preds):
        value = _mape(preds)
        return value <= limit, f"MAPE {value:.1f} <= {limit:g} %"
    return check


def median_pp_at_most(limit: float) -> Metric:
    def check(preds):
        value = statistics.median(_abs_pp(preds))
        return value <= limit, f"median {value:.1f} <= {limit:g} pp"
    return check


def each_pp_at_most(limit: float) -> Metric:
    def check(preds):
        value = max(_abs_pp(preds))
        return value <= limit, f"every row {value:.1f} <= {limit:g} pp"
    return check


def worst_pp_at_most_between(limit: float, low: int, high: int) -> Metric:
    def check(preds):
        rows = [p for p in preds if low <= p.gpus <= high]
        value = max(_abs_pp(rows)) if rows else float("nan")
        return value <= limit, f"worst {value:.1f} <= {limit:g} pp at {low}-{high} GPUs"
    return check


def each_pct_at_most(limit: float) -> Metric:
    def check(preds):
        value = max(abs(p.error()) for p in preds)
        return value <= limit, f"every row {value:.1f} <= {limit:g} %"
    return check


def signed_median_within(limit: float) -> Metric:
    def check(preds):
        value = statistics.median(p.error() for p in preds)
        return abs(value) <= limit, f"signed median {value:+.1f} within +-{limit:g} pp"
    return check


HOROVOD_TARGETS = (median_pp_at_most(2), worst_pp_at_most_between(4, 32, 128))
TARGETS: dict[str, tuple[Metric, ...]] = {
    "tc allreduce nccl": (mape_at_most(5),), "tc allreduce gloo": (mape_at_most(10),),
    "tc p2p nccl": (mape_at_most(2),), "tc p2p gloo": (mape_at_most(5),),
    "nccl busbw A100 8 GPUs": (mape_at_most(10),), "nccl busbw H200 8 GPUs": (mape_at_most(10),),
    "horovod InceptionV3": HOROVOD_TARGETS, "horovod ResNet-101": HOROVOD_TARGETS,
    "horovod TCP-vs-RoCE gap": (each_pp_at_most(3),),
    "chainermn2017 ChainerMN": (median_pp_at_most(5),), "chainermn2017 MXNet": (median_pp_at_most(5),),
    "chainermn2017 CNTK": (median_pp_at_most(5),), "chainermn2017 TensorFlow": (median_pp_at_most(5),),
    "goyal2017 caffe2+gloo ResNet-50": (each_pp_at_most(3),),
    "megatron2021 GPT 1.7B-1T": (each_pct_at_most(10),),
}
"""Issue 26's targets per group (the tc, busbw and Horovod ones from before it; 'get the TCP-vs-RoCE
gap right within a few percentage points': 3 pp per GPU count); issue 28's Megatron-LM rows: every
row's teraFLOP/s per GPU within 10 %. Every gated efficiency group also
has 'signed median within +-2 pp' (no systematic optimism): added in ``targets_of``."""

KNOWN_GAPS = {
    "horovod InceptionV3": "its median (0.8 pp) and every target are met; its worst row, RDMA at 8 GPUs (+4.1 pp: "
                           "521.0 ms predicted, 544.7 measured), lies outside the target's 32-128 GPUs and above the "
                           "floor's worst 3.8 pp: issue 26's ring schedule hides NCCL's hop latencies under the "
                           "transfers (the detailed mode and SimGrid show they do), 2.9 ms less exposed at 8 GPUs "
                           "(3.5 -> 4.1 pp); the measured time's excess there is not a ring latency (docs/validation.md)",
    "chainermn2017 MXNet": "MXNet overlaps every key's push and pull with backward, so the model's parameter servers "
                           "hide behind compute up to 32 GPUs where the plot shows 53-60 %; its throughput per node "
                           "stays at 190-240 images/s from 4 GPUs on, and the node's input pipeline is not that "
                           "ceiling (its 4 decode threads prepare ~4,700 of the post's 256 x 256 images a second); "
                           "the loss is inside one node already, and no sourced mechanism left explains it "
                           "(docs/validation.md)",
    "goyal2017 caffe2+gloo ResNet-50": "with 16 halving/doubling allreduces in flight and each layer reduced as "
                                       "backward produces it, the model hides 112 ms of communication behind a 120 ms "
                                       "backward; waiting for the slowest of 352 GPUs (1.48 % spread) leaves 97.6 % where the "
                                       "paper measures 89-90 %; the no-overlap floor is closer (docs/validation.md)",
    "horovod TCP-vs-RoCE gap": "a tie: the floor predicts no gap at all (one line rate for both), so it is right on "
                               "the rows digitized at 0; the model's median |error| 0.9 pp against the floor's 0.9 "
                               "(its worst 3.5 pp against the floor's 4.2), inside the bars' +-2-16 pp digitization "
                               "noise (validation/devset/README.md)",
}
"""Groups worse than their floor that CI tolerates by name, each with why; printed as failures.
``--strict`` fails them too; one that beats its floor again must leave this list
(tests/test_devset_and_cli.py checks)."""


@dataclass(frozen=True)
class GroupSummary:
    group: str
    rows: int
    model: str
    floor: str
    worse_than_floor: bool
    target: str
    worst_case: str
    gated: bool = True
    signed_median: float | None = None
    """Efficiency groups: the median of predicted - measured (pp); > 0 is optimistic."""
    targets_met: tuple[bool, ...] = ()
    readme_floor: str = ""

    @property
    def status(self) -> str:
        if not self.targets_met:
            return ""
        return "met" if all(self.targets_met) else "missed"


def targets_of(group: str, unit: str, gated: bool) -> tuple[Metric, ...]:
    listed = TARGETS.get(group, ())
    if unit == "eff" and gated:
        return (*listed, signed_median_within(2))
    return listed


def _readme_floor_errors(group: str):
    if group not in README_FLOORS:
        return None
    return README_FLOORS[group]


def summarise(group: str, preds: list) -> GroupSummary:
    gated = [p for p in preds if p.gated]
    use = gated or preds
    unit = use[0].unit
    errs = [abs(p.error()) for p in use]
    naive = [abs(p.error(p.naive)) for p in use]
    worst = max(use, key=lambda p: abs(p.error()))
    readme = _readme_floor_errors(group)
    readme_text = ""
    signed = None
    if unit == "eff":
        signed = statistics.median(p.error() for p in use)
        model = f"median {statistics.median(errs):.1f} / worst {max(errs):.1f} pp"
        floor_median, floor_worst = statistics.median(naive), max(naive)
        floor = f"median {floor_median:.1f} / worst {floor_worst:.1f} pp"
        if readme is not None:
            r_med, r_worst = readme[1]
            readme_text = f"{r_med:g} / {r_worst:g} pp"
            floor_median, floor_worst = min(floor_median, r_med), min(floor_worst, r_worst)
        worse = statistics.median(errs) > floor_median or max(errs) > floor_worst
    else:
        model = f"MAPE {statistics.mean(errs):.1f} % (worst {max(errs):.1f})"
        floor = f"MAPE {statistics.mean(naive):.1f} %"
        if readme is not None:
            readme_text = f"{readme[1]:g} %"
        worse = statistics.mean(errs) > statistics.mean(naive)
    checks = [check(use) for check in targets_of(group, unit, bool(gated))]
    target = "; ".join(text for _, text in checks)
    if readme_text:
        readme_text = f"README {readme_text}" + (f": {FLOOR_NOTES[group]}" if group in FLOOR_NOTES else "")
    return GroupSummary(group, len(use), model, floor, worse and bool(gated), target,
                        f"{worst.case}: {worst.error():+.1f}{' pp' if unit == 'eff' else ' %'}",
                        gated=bool(gated), signed_median=signed, targets_met=tuple(ok for ok, _ in checks),
                        readme_floor=readme_text)


def tolerated(strict: bool, tolerate: set[str] | None) -> set[str]:
    """The known gaps a run tolerates by name: none with ``strict``, the named ones where any are
    named (CI's .ci/run names each), else all of KNOWN_GAPS."""
    if strict:
        return set()
    return set(KNOWN_GAPS) if tolerate is None else set(tolerate) & set(KNOWN_GAPS)


def failing_groups(summaries: list[GroupSummary], strict: bool = False, tolerate: set[str] | None = None) -> list[str]:
    """Groups worse than their floor that fail the run: all of them with ``strict``, else those
    not tolerated by name (``tolerated``)."""
    allowed = tolerated(strict, tolerate)
    return [s.group for s in summaries if s.worse_than_floor and s.group not in allowed]


def devset_report(summaries: list[GroupSummary], strict: bool = False, tolerate: set[str] | None = None) -> str:
    allowed = tolerated(strict, tolerate)
    lines = ["| group | rows | scalebench | signed median | naive floor | target | status | worst row |",
             "|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        flag = ""
        if s.worse_than_floor:
            flag = " **worse than the floor**" + (" (known gap, tolerated by name)" if s.group in allowed else "")
        signed = "" if s.signed_median is None else f"{s.signed_median:+.1f} pp"
        floor = s.floor + (f"; {s.readme_floor}" if s.readme_floor else "")
        rows = f"{s.rows}" + ("" if s.gated else " (not gated)")
        lines.append(f"| {s.group} | {rows} | {s.model}{flag} | {signed} | {floor} | {s.target} | {s.status} "
                     f"| {s.worst_case} |")
    known = [s.group for s in summaries if s.worse_than_floor and s.group in allowed]
    failing = failing_groups(summaries, strict, tolerate)
    judged = [s for s in summaries if s.targets_met]
    met = sum(all(s.targets_met) for s in judged)
    gated = [s for s in summaries if s.gated]
    beating = sum(not s.worse_than_floor for s in gated)
    lines.append("")
    for group in known:
        lines.append(f"FAIL tolerated by name (known gap; fails under --strict): {group}: {KNOWN_GAPS[group]}")
    for group in failing:
        if group in KNOWN_GAPS:
            lines.append(f"known gap not tolerated here: {group}: {KNOWN_GAPS[group]}")
    missed = [s.group for s in judged if not all(s.targets_met)]
    lines.append(f"targets: {met} of {len(judged)} groups meet all their targets"
                 + (f"; missed: {', '.join(missed)}" if missed else ""))
    lines.append(f"floors: {beating} of {len(gated)} gated groups beat or tie their naive floor"
                 + (" (every group beats its floor with no exemption)" if beating == len(gated) else ""))
    lines.append("FAIL: worse than the naive floor in " + ", ".join(failing) if failing
                 else "PASS: every gated group beats or ties the naive floor"
                 + (f", except the known gaps tolerated by name ({len(known)})" if known else ""))
    return "\n".join(lines) + "\n"
