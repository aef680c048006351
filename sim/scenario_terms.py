"""A calibration file's scenario terms: what a user's own runs measured beyond the model that is
not hardware (``scalebench calibrate --from-runs`` writes them; sim/runs_fit.py fits them).

A calibration file is a catalog file (``--catalog``): its ``gpus:`` and ``links:`` entries replace
the scenario's GPU and links by name (``p100_pcie: {base: p100_pcie, compute_scale: 0.98}``,
``tcp_25gbe: {base: tcp_25gbe, bandwidth_factor: 0.93, ...}``) and its ``calibration:`` section
holds these terms, which ``sim.config.scenario_from_dict`` (and the planner's request) set on every
scenario read with that catalog (``sim.calibrated.apply_scenario_terms``), so simulate, run, plan
and explain all get them:

    calibration:
      workload: inception_v3        # the model the runs trained (for the record)
      multi_gpu_overhead_ms: 3.2    # per iteration, every job of more than one GPU
      inter_node_overhead_ms: 21.5  # per iteration, beyond that, where the job spans nodes
      overlap: false                # only where phase times identified it
      source: ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError, reject_unknown_keys, require_positive

TERMS_KEYS = ("workload", "multi_gpu_overhead_ms", "inter_node_overhead_ms", "overlap", "source")


@dataclass(frozen=True)
class ScenarioTerms:
    workload: str | None = None
    """The model the runs trained (for the record)."""
    multi_gpu_overhead_s: float = 0.0
    """Sets ``strategy.multi_gpu_overhead_s`` where not 0."""
    inter_node_overhead_s: float = 0.0
    """Sets ``strategy.inter_node_overhead_s`` where not 0."""
    overlap: bool | None = None
    """Replaces ``strategy.overlap`` where phase times identified it; None: the scenario's."""
    source: str = ""


def terms_from_dict(spec: Any, where: str = "catalog.calibration") -> ScenarioTerms:
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(TERMS_KEYS))
    reject_unknown_keys(where, spec, TERMS_KEYS)
    workload = spec.get("workload")
    if workload is not None and not isinstance(workload, str):
        raise ConfigError(f"{where}.workload", workload, "a workload name")
    overlap = spec.get("overlap")
    if overlap is not None and not isinstance(overlap, bool):
        raise ConfigError(f"{where}.overlap", overlap, "true or false")
    return ScenarioTerms(
        workload=workload,
        multi_gpu_overhead_s=float(require_positive(f"{where}.multi_gpu_overhead_ms",
                                                    spec.get("multi_gpu_overhead_ms", 0.0), allow_zero=True)) / 1e3,
        inter_node_overhead_s=float(require_positive(f"{where}.inter_node_overhead_ms",
                                                     spec.get("inter_node_overhead_ms", 0.0), allow_zero=True)) / 1e3,
        overlap=overlap,
        source=str(spec.get("source", "")),
    )


def terms_to_dict(terms: ScenarioTerms) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if terms.workload is not None:
        out["workload"] = terms.workload
    if terms.multi_gpu_overhead_s:
        out["multi_gpu_overhead_ms"] = round(terms.multi_gpu_overhead_s * 1e3, 4)
    if terms.inter_node_overhead_s:
        out["inter_node_overhead_ms"] = round(terms.inter_node_overhead_s * 1e3, 4)
    if terms.overlap is not None:
        out["overlap"] = terms.overlap
    if terms.source:
        out["source"] = terms.source
    return out
