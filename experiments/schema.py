"""JSON Schema of the experiment file (``scalebench schema experiment``): the scenario's schema
(sim.schema) plus the keys experiments/config.py validates, from its own tuples and registries."""

from __future__ import annotations

from typing import Any

from sim.schema import (
    BOOL,
    INT_NONNEG,
    INT_POS,
    NUM_POS,
    SCHEMA_URI,
    STRING,
    scenario_definitions,
    scenario_properties,
)


def experiment_field_types() -> dict[str, dict[str, Any]]:
    """``section.key`` -> JSON Schema, for every key experiments/config.py (and real/config.py, for
    the ``real:`` section a measured point carries) accepts beyond the scenario's."""
    from experiments.config import BACKENDS, CALIBRATION_KEYS, REAL_CALL_KEYS
    from real.config import BACKENDS as REAL_BACKENDS
    from real.config import (
        COMPRESSIONS,
        DEVICES,
        PIPELINE_SCHEDULES,
        REAL_KEYS,
        REAL_STRATEGIES,
        TOPOLOGIES,
    )

    real = {"iterations": INT_POS, "warmup": INT_NONNEG, "timeout_s": NUM_POS,
            "link": {"oneOf": [STRING, {"type": "object"}]}, "topology": {"enum": list(TOPOLOGIES)},
            "strategy": {"enum": list(REAL_STRATEGIES)}, "compression": {"enum": list(COMPRESSIONS)},
            "backend": {"enum": list(REAL_BACKENDS)}, "device": {"enum": list(DEVICES)}, "lr": NUM_POS, "threads": INT_NONNEG, "baseline": BOOL,
            "microbatches": INT_POS, "schedule": {"enum": list(PIPELINE_SCHEDULES)},
            "fault": {"type": "object", "required": ["rank", "iteration"]}}
    assert set(real) == {*REAL_CALL_KEYS, *REAL_KEYS}
    calibration = {"single_gpu_iteration_time_s": NUM_POS, "single_gpu_samples_per_s": NUM_POS, "batch_size": INT_POS,
                   "source": STRING}
    assert set(calibration) == set(CALIBRATION_KEYS)
    return {
        "sweep": {"$ref": "#/$defs/sweep"},
        "backend": {"enum": list(BACKENDS)},
        "repetitions": INT_POS, "seed": INT_NONNEG, "max_points": INT_POS, "iterations": INT_POS,
        "real": {"type": "object", "additionalProperties": False, "properties": real},
        "calibration": {"type": "object", "additionalProperties": False, "properties": calibration,
                        "oneOf": [{"required": ["single_gpu_iteration_time_s"]}, {"required": ["single_gpu_samples_per_s"]}]},
        "tolerance": {"type": "object", "additionalProperties": False,
                      "properties": {"efficiency_pp": NUM_POS, "iteration_time_pct": NUM_POS}},
        "plan": plan_schema(),
    }


def plan_schema() -> dict[str, Any]:
    """The ``plan:`` section (sim.planner.request.PLAN_KEYS): a list option also takes one value."""
    from sim.codecs import CODEC_PATHS, CODECS
    from sim.costs.backends import BACKENDS as LIBRARIES
    from sim.planner.request import OBJECTIVES, PLAN_KEYS
    from sim.strategy import COLLECTIVES, RECOMPUTE, SCHEDULES, ZERO_STAGES

    def some(item: dict[str, Any]) -> dict[str, Any]:
        return {"oneOf": [item, {"type": "array", "minItems": 1, "items": item}]}

    codec = {"type": "string", "pattern": "^(none|(" + "|".join(CODECS) + ")(:(" + "|".join(CODEC_PATHS) + "))?)$"}
    props = {
        "objective": {"enum": list(OBJECTIVES)}, "max_gpus": INT_POS, "global_batch": INT_POS, "top": INT_POS,
        "max_tp": INT_POS, "max_pp": INT_POS, "max_micro_batches": INT_POS, "max_candidates": INT_POS,
        "max_memory_gib": NUM_POS, "backends": some({"enum": list(LIBRARIES)}),
        "collectives": some({"enum": list(COLLECTIVES)}), "codecs": some(codec), "bucket_mib": some(NUM_POS),
        "schedules": some({"enum": list(SCHEDULES)}),
        "max_cp": INT_POS, "max_vpp": INT_POS, "max_ep": INT_POS,
        "zero_stages": some({"enum": list(ZERO_STAGES)}), "recompute": some({"enum": list(RECOMPUTE)}),
        "allow_lossy": {"type": "boolean"},
    }
    assert set(props) == set(PLAN_KEYS), sorted(set(props) ^ set(PLAN_KEYS))
    return {"type": "object", "additionalProperties": False, "properties": {k: props[k] for k in PLAN_KEYS}}


def sweep_schema() -> dict[str, Any]:
    """Axes: a dotted field (experiments.config.SWEEPABLE_SECTIONS) -> a list, {geometric} or {range};
    ``case``: named cases setting several fields together."""
    from experiments.config import CASE_AXIS, SWEEPABLE_SECTIONS

    def mapping(keys: tuple[str, ...], required: tuple[str, ...]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "required": list(required),
                "properties": {k: {"type": "number"} for k in keys}}

    axis = {"oneOf": [
        {"type": "array", "minItems": 1},
        {"type": "object", "additionalProperties": False, "required": ["geometric"],
         "properties": {"geometric": mapping(("start", "stop", "factor"), ("start", "stop"))}},
        {"type": "object", "additionalProperties": False, "required": ["range"],
         "properties": {"range": mapping(("start", "stop", "step"), ("start", "stop"))}},
    ]}
    dotted = "^(" + "|".join(SWEEPABLE_SECTIONS) + r")(\.[^.]+)*$"
    case = {"type": "object", "minProperties": 1, "properties": {"label": STRING},
            "propertyNames": {"pattern": f"^label$|{dotted}"}}
    return {"type": "object", "properties": {CASE_AXIS: {"type": "array", "minItems": 1, "items": case}},
            "patternProperties": {dotted: axis}, "additionalProperties": False}


def experiment_schema() -> dict[str, Any]:
    from experiments.config import EXPERIMENT_KEYS

    props = {**scenario_properties(), **experiment_field_types()}
    assert set(props) == set(EXPERIMENT_KEYS), sorted(set(props) ^ set(EXPERIMENT_KEYS))
    return {"$schema": SCHEMA_URI, "title": "scalebench experiment (a scenario and a sweep: scalebench run)",
            "type": "object", "additionalProperties": False, "properties": {k: props[k] for k in EXPERIMENT_KEYS},
            "$defs": {**scenario_definitions(), "sweep": sweep_schema()}}
