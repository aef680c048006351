"""Telling the machine's noise from the model's error. Pure: decisions on recorded launches.

A point's launches (``measure.rounds`` of them, more when re-measured) each carry what the rest
of the machine did meanwhile (real/load.py: other processes' share of the CPU, the hypervisor's
steal). Definitions:

- a launch is *disturbed* when other processes used more than ``busy_percent`` of the machine's
  CPU, or the hypervisor took more than ``steal_percent``, during it;
- a point is *judged* when it has at least ``rounds`` undisturbed launches of which ``rounds``
  agree: the tightest window of ``rounds`` consecutive times (sorted) spreads
  (max - min) / median by at most ``spread_percent``; its value is that window's median. Else
  it is *not judged*, with the reason, and compared by the median of all its launches;
- contention only ever slows a launch down, so a disturbed point's fastest launch is an upper
  bound on its undisturbed time: a prediction slower than that by ``fail_percent`` is a model
  error whatever the noise (``error_lower_bound``).

The verdict (``decide``):
1. INCONCLUSIVE when the calibration the predictions come from was disturbed (its numbers are
   the machine's neighbours', and every prediction inherits them);
2. FAIL when the judged points miss the thresholds (MAPE, worst point) and there are at least
   ``min_points`` of them, or when the error lower bound of an unjudged point (of any point,
   where too few are judged for the thresholds to apply) passes ``fail_percent`` (the worst-point
   threshold, else the MAPE one);
3. PASS when at least ``min_points`` points are judged and within the thresholds;
4. else INCONCLUSIVE, with each unjudged point's reason: the measurement cannot tell the model's
   error from the machine's noise, and the verdict says nothing about the model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

BUSY_PERCENT = 10.0
"""Default ``measure.busy_percent``: real.load.BUSY_LIMIT, in percent."""
STEAL_PERCENT = 10.0
"""real.steal.STEAL_LIMIT in percent: a launch that lost more to the hypervisor is disturbed."""
SPREAD_PERCENT = 25.0
"""Default ``measure.max_spread_percent``: the largest spread of a point's launches in the
committed full run (78 points, 3 launches each, judged a clean run: median 5.6 %, largest 25 %)."""
EXTRA_ROUNDS = 2
"""Default of how many launches beyond ``measure.rounds`` a point not judged may get."""


@dataclass(frozen=True)
class Launch:
    time_s: float
    others_percent: float = math.nan
    """Other processes' share of the machine's CPU during the launch (NaN: not recorded)."""
    steal_percent: float = math.nan
    others_top: str = ""

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Launch:
        def num(key: str) -> float:
            v = row.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan

        return cls(time_s=num("iteration_time_s"), others_percent=num("others_cpu_percent"),
                   steal_percent=num("cpu_steal_percent"), others_top=str(row.get("others_top") or ""))

    def disturbed(self, busy_percent: float, steal_percent: float = STEAL_PERCENT) -> bool:
        return self.others_percent > busy_percent or self.steal_percent > steal_percent  # NaN compares False


@dataclass(frozen=True)
class Judgement:
    judged: bool
    value_s: float
    """The window's median when judged, else the median of all launches."""
    fastest_s: float
    spread: float
    """(max - min) / median of the judged window (or of the undisturbed launches when too few)."""
    disturbed: int
    launches: int
    reason: str
    """Empty when judged; else why not, in words."""
    load_recorded: bool


def _tightest(times: Sequence[float], k: int) -> list[float]:
    ordered = sorted(times)
    windows = [ordered[i:i + k] for i in range(len(ordered) - k + 1)]
    return min(windows, key=lambda w: (w[-1] - w[0]) / statistics.median(w) if statistics.median(w) > 0 else math.inf)


def spread_of(times: Sequence[float]) -> float:
    if len(times) < 2:
        return math.nan
    middle = statistics.median(times)
    return (max(times) - min(times)) / middle if middle > 0 else math.nan


def judge_point(launches: Sequence[Launch], *, rounds: int, busy_percent: float = BUSY_PERCENT,
                spread_percent: float = SPREAD_PERCENT, steal_percent: float = STEAL_PERCENT) -> Judgement:
    timed = [x for x in launches if not math.isnan(x.time_s)]
    if not timed:
        return Judgement(False, math.nan, math.nan, math.nan, 0, 0, "no launch measured", False)
    clean = [x for x in timed if not x.disturbed(busy_percent, steal_percent)]
    disturbed = len(timed) - len(clean)
    everything = statistics.median(x.time_s for x in timed)
    fastest = min(x.time_s for x in timed)
    recorded = any(not math.isnan(x.others_percent) for x in timed)
    need = max(1, rounds)
    if len(clean) < need:
        busiest = max(timed, key=lambda x: -1.0 if math.isnan(x.others_percent) else x.others_percent)
        why = (f"{disturbed} of {len(timed)} launches disturbed (other processes used up to "
               f"{busiest.others_percent:.0f}% of the CPU" + (f": {busiest.others_top}" if busiest.others_top else "")
               + (f"; the hypervisor took up to {max(x.steal_percent for x in timed):.0f}%"
                  if any(x.steal_percent > steal_percent for x in timed) else "") + ")")
        return Judgement(False, everything, fastest, spread_of([x.time_s for x in clean]), disturbed, len(timed),
                         why, recorded)
    window = _tightest([x.time_s for x in clean], need)
    spread = spread_of(window)
    if not math.isnan(spread) and 100 * spread > spread_percent:
        return Judgement(False, everything, fastest, spread, disturbed, len(timed),
                         f"its {len(clean)} undisturbed launches agree no closer than {100 * spread:.0f}% "
                         f"(limit {spread_percent:g}%)", recorded)
    return Judgement(True, statistics.median(window), fastest, spread, disturbed, len(timed), "", recorded)


def error_lower_bound(predicted_s: float, fastest_s: float) -> float:
    """The least the model can be off by, whatever the noise: (p - fastest) / fastest when the
    prediction is slower than the fastest launch (noise only slows launches), else 0."""
    if math.isnan(predicted_s) or math.isnan(fastest_s) or fastest_s <= 0:
        return math.nan
    return max(0.0, (predicted_s - fastest_s) / fastest_s)


@dataclass(frozen=True)
class Decision:
    status: str
    """PASS, FAIL or INCONCLUSIVE."""
    reasons: tuple[str, ...]
    judged: int
    compared: int

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.status]


EXIT_STATUS = {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 3}
"""scalebench validate's exit status per verdict (2 stays bad input)."""


def decide(rows: Sequence[dict[str, Any]], *, mape_percent: float, worst_percent: float | None, min_points: int,
           calibration_noise: str = "") -> Decision:
    """The verdict on rows with ``rel_error``, ``judged``, ``noise`` and ``error_lower_bound``
    (validation/run.py), as the module docstring states it."""
    compared = [r for r in rows if _num(r.get("rel_error"))]
    judged = [r for r in compared if r.get("judged")]
    unjudged = [r for r in compared if not r.get("judged")]
    fail_percent = worst_percent if worst_percent is not None else mape_percent
    if calibration_noise:
        return Decision("INCONCLUSIVE", (f"the calibration was disturbed: {calibration_noise}",), len(judged),
                        len(compared))
    fails = []
    if len(judged) >= min_points:
        errors = [abs(r["rel_error"]) for r in judged]
        mape = 100 * sum(errors) / len(errors)
        if mape > mape_percent:
            fails.append(f"MAPE {mape:.1f}% over the {len(judged)} judged points > threshold {mape_percent:g}%")
        worst = max(judged, key=lambda r: abs(r["rel_error"]))
        if worst_percent is not None and 100 * abs(worst["rel_error"]) > worst_percent:
            fails.append(f"worst point {worst.get('point', '')} at {100 * abs(worst['rel_error']):.1f}% > "
                         f"{worst_percent:g}%")
    for r in unjudged if len(judged) >= min_points else compared:  # too few judged: no MAPE rule for them
        bound = r.get("error_lower_bound")
        if _num(bound) and 100 * bound > fail_percent:
            fails.append(f"{r.get('point', '')} predicted {100 * bound:.0f}% slower than its fastest launch, more than "
                         f"{fail_percent:g}% (contention only slows launches: no noise explains it)")
    if fails:
        return Decision("FAIL", tuple(fails), len(judged), len(compared))
    if len(judged) >= min_points:
        return Decision("PASS", (), len(judged), len(compared))
    why = [f"only {len(judged)} of {len(compared)} points could be judged (need {min_points})"]
    why += [f"{r.get('point', '')}: {r.get('noise', '')}" for r in unjudged]
    return Decision("INCONCLUSIVE", tuple(why), len(judged), len(compared))


def calibration_noise(launches: Sequence[dict[str, Any]], busy_percent: float = BUSY_PERCENT) -> str:
    """Why the calibration's launches (real.load.LAUNCH_LOG entries) cannot be trusted, or ""."""
    bad = [x for x in launches if _num(x.get("others_cpu_fraction")) and 100 * x["others_cpu_fraction"] > busy_percent]
    if not bad:
        return ""
    worst = max(bad, key=lambda x: x["others_cpu_fraction"])
    top = f" ({worst['others_top']})" if worst.get("others_top") else ""
    return (f"{len(bad)} of {len(launches)} of its launches ran while other processes used more than "
            f"{busy_percent:g}% of the CPU, up to {100 * worst['others_cpu_fraction']:.0f}%{top}")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
