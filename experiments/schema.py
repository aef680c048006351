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
    builtin_names,
    enum_schema,
    names_as_enums,
    scenario_definitions,
    scenario_properties,
    size_schema,
    without_catalog,
)
from sim.schema_docs import describe, fill_nested

TEXT: dict[str, str] = {
    "sweep": "The axes: a dotted field of the scenario (cluster.gpus, strategy.codec ...) -> a list of values, "
             "{geometric: {start, stop, factor}} or {range: {start, stop, step}}; case: named cases setting several "
             "fields together. The points are the cartesian product.",
    "backend": "sim (the simulator), real (the torch harness measures each point) or both.",
    "repetitions": "Runs of every point; repetition r runs with simulation.seed = seed + r.",
    "seed": "The first repetition's simulation.seed.",
    "max_points": "A larger sweep is refused before anything runs.",
    "iterations": "Each simulated point is a run of this many iterations (stragglers, faults, asynchronous "
                  "parameter servers: sim.run.simulate_run) instead of one iteration.",
    "real": "The measured points' harness options (backend: real or both): iterations, warmup, timeout_s, link, "
            "topology and the harness' own keys.",
    "calibration": "One measured single-GPU figure that scales every layer's compute so that one GPU at that batch "
                   "takes the measured time (sim/calibration.py).",
    "tolerance": "`scalebench regress`'s tolerances for this scenario.",
    "plan": "Every point is a plan search with these options (`scalebench plan`); its row is the winner's.",
    "real.iterations": "Timed iterations per point.", "real.warmup": "Untimed iterations before them.",
    "real.timeout_s": "A step that takes longer than this ends the run (a hung rank).",
    "real.link": "An emulated link (1gbit, 100mbit, ...: tc on loopback in a network namespace; root) or a mapping "
                 "of its rate and delay.",
    "real.topology": "shared (one tbf: the medium's rate is the total over all ranks) or per_link (htb: a rate per "
                     "rank pair).",
    "real.strategy": "The harness' strategy (DDP, parameter servers, pipeline ...).",
    "real.compression": "The gradient codec the harness' DDP hook applies.",
    "real.backend": "torch.distributed's backend: gloo (CPU) or nccl (GPU).",
    "real.device": "Where a rank's model, batches and gradients live: cpu, or cuda (device LOCAL_RANK modulo the "
                   "machine's devices); default cuda with backend nccl, else cpu.",
    "real.lr": "Learning rate of the harness' optimizer.",
    "real.threads": "torch threads per rank (0: the machine's cores shared among the co-located ranks).",
    "real.baseline": "Also time one rank alone (T1) for the efficiency.",
    "real.microbatches": "Micro-batches per iteration of a measured pipeline.",
    "real.schedule": "The measured pipeline's schedule.",
    "real.fault": "A rank that fails at an iteration: {rank, iteration}.",
    "calibration.single_gpu_iteration_time_s": "One GPU's measured iteration time at batch_size.",
    "calibration.single_gpu_samples_per_s": "One GPU's measured throughput at batch_size.",
    "calibration.batch_size": "The batch the figure was measured at (default: each point's).",
    "calibration.source": "Where the figure comes from.",
    "tolerance.efficiency_pp": "Allowed change of scaling efficiency, percentage points (default 1).",
    "tolerance.iteration_time_pct": "Allowed change of the iteration time, percent (default 5).",
    "plan.objective": "time (seconds per sample, default), samples_per_s or gpu_hours.",
    "plan.max_gpus": "Also try every sensible GPU count up to this one.",
    "plan.global_batch": "Samples per iteration over all replicas (batch per replica = global / dp); default: the "
                         "workload's batch per replica (weak scaling).",
    "plan.top": "Candidates shown (default 5).",
    "plan.max_tp": "Largest tensor-parallel degree (default: the GPUs of one node).",
    "plan.max_pp": "Most pipeline stages.",
    "plan.max_micro_batches": "Most micro-batches per iteration (default: up to the batch per replica).",
    "plan.backends": "Collective libraries to try (default: what the devices run).",
    "plan.collectives": "Gradient reductions to try (default: auto, the library's algorithms, hierarchical).",
    "plan.codecs": "Gradient codecs to try: none, fp16, bf16, fp8_e4m3[:allgather|:reduce_scatter] ...",
    "plan.bucket_mib": "Bucket sizes to try, MiB or sizes (512K, 25M; default 5, 25, 100).",
    "plan.schedules": "Pipeline schedules to try (default: gpipe and 1f1b).",
    "plan.max_memory_gib": "Memory per GPU to plan with, GiB or a size (default: the GPU's).",
    "plan.max_candidates": "A larger search space is refused before simulating (default 1,000,000).",
    "plan.max_cp": "Largest context-parallel degree (default: a node's GPUs for sequences of 16k tokens or more, "
                   "else 1).",
    "plan.max_vpp": "Most model chunks per pipeline rank, the interleaved 1F1B schedule (default 4).",
    "plan.allow_lossy": "Also try the lossy gradient codecs (sim.planner.request.LOSSY_CODECS; --allow-lossy); "
                        "default false: only the compute precision on the wire (a narrower codec rounds every gradient).",
    "plan.max_ep": "Largest expert-parallel degree (mixture-of-experts models; default: the experts).",
    "plan.zero_stages": "ZeRO stages 0-3 to try (default all; the lightest that fits is kept).",
    "plan.recompute": "Activation recomputation to try: none, selective, full (default all; the lightest that fits).",
}
"""Descriptions of the experiment's own keys (the scenario's come from sim/schema_docs.py)."""


def _described(section: str, props: dict[str, Any]) -> dict[str, Any]:
    return {k: describe(v, TEXT.get(f"{section}.{k}")) for k, v in props.items()}


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
    top = {
        "sweep": {"$ref": "#/$defs/sweep"},
        "backend": {"enum": list(BACKENDS)},
        "repetitions": INT_POS, "seed": INT_NONNEG, "max_points": INT_POS, "iterations": INT_POS,
        "real": {"type": "object", "additionalProperties": False, "properties": _described("real", real)},
        "calibration": {"type": "object", "additionalProperties": False, "properties": _described("calibration", calibration),
                        "oneOf": [{"required": ["single_gpu_iteration_time_s"]}, {"required": ["single_gpu_samples_per_s"]}]},
        "tolerance": {"type": "object", "additionalProperties": False,
                      "properties": _described("tolerance", {"efficiency_pp": NUM_POS, "iteration_time_pct": NUM_POS})},
        "plan": plan_schema(),
    }
    return {k: describe(v, TEXT.get(k)) for k, v in top.items()}


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
        "max_memory_gib": size_schema(NUM_POS), "backends": some({"enum": list(LIBRARIES)}),
        "collectives": some({"enum": list(COLLECTIVES)}), "codecs": some(codec), "bucket_mib": some(size_schema(NUM_POS)),
        "schedules": some({"enum": list(SCHEDULES)}),
        "max_cp": INT_POS, "max_vpp": INT_POS, "max_ep": INT_POS,
        "zero_stages": some({"enum": list(ZERO_STAGES)}), "recompute": some({"enum": list(RECOMPUTE)}),
        "allow_lossy": {"type": "boolean"},
    }
    assert set(props) == set(PLAN_KEYS), sorted(set(props) ^ set(PLAN_KEYS))
    return {"type": "object", "additionalProperties": False,
            "properties": _described("plan", {k: props[k] for k in PLAN_KEYS})}


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
    return {"type": "object", "properties": {CASE_AXIS: describe({"type": "array", "minItems": 1, "items": case},
                                                                   "Named cases: each a {label, dotted field: value ...}")},
            "patternProperties": {dotted: axis}, "additionalProperties": False}


NAMED_AXES = {"workload.model": "model", "cluster.gpu": "gpu", "cluster.intra_link": "link",
              "cluster.inter_link": "link", "cluster.host": "host", "strategy.codec": "codec"}
"""Axes whose values are names of the zoo, the built-in catalog or the codecs."""


def named_axes() -> dict[str, Any]:
    """The sweep's and the cases' named axes as enums (applied without a catalog: of their own)."""
    names = builtin_names()
    values = {axis: enum_schema(names[kind]) for axis, kind in NAMED_AXES.items()}
    return {"properties": {**{axis: {"type": "array", "items": v} for axis, v in values.items()},
                           "case": {"items": {"properties": values}}}}


def experiment_schema() -> dict[str, Any]:
    from experiments.config import EXPERIMENT_KEYS

    props = {**scenario_properties(), **experiment_field_types()}
    assert set(props) == set(EXPERIMENT_KEYS), sorted(set(props) ^ set(EXPERIMENT_KEYS))
    enums = names_as_enums()
    return fill_nested({"$schema": SCHEMA_URI, "title": "scalebench experiment (a scenario and a sweep: scalebench run)",
                        "type": "object", "additionalProperties": False,
                        "properties": {k: props[k] for k in EXPERIMENT_KEYS},
                        **without_catalog({"properties": {**enums, "sweep": named_axes()}}),
                        "$defs": {**scenario_definitions(), "sweep": sweep_schema()}})
