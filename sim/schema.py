"""JSON Schema of the scenario file (``scalebench schema``), generated from what validates it.

The sections and their keys are the parsers' own ``*_KEYS`` tuples, the allowed values their
registries (COLLECTIVES, PRECISIONS, the catalog, the zoo, ...); FIELD_TYPES below adds only what
a tuple cannot say: each key's JSON type and bounds. tests/test_schema.py holds the two equal
(a key added to a parser without a type here, or typed here and unknown to the parser, fails) and
checks that values the schema allows the parsers accept. An editor given the schema completes
keys and enum values and flags unknown keys; the parsers stay the judge (cross-field rules such
as dp x tp x pp = GPUs, or memory, are theirs alone).
"""

from __future__ import annotations

from typing import Any

SCHEMA_URI = "https://json-schema.org/draft/2020-12/schema"

INT_POS = {"type": "integer", "minimum": 1}
INT_NONNEG = {"type": "integer", "minimum": 0}
NUM_POS = {"type": "number", "exclusiveMinimum": 0}
NUM_NONNEG = {"type": "number", "minimum": 0}
FRACTION = {"type": "number", "exclusiveMinimum": 0, "maximum": 1}
BOOL = {"type": "boolean"}
STRING = {"type": "string"}
SIZE_TEXT = {"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*([KMGTkmgt]([iI]?[Bb])?|[Bb])?\s*$"}
"""A size as the command line writes it (9K, 256M, 1G: sim.units.require_size), for keys with a size unit."""


def size_schema(number: dict[str, Any]) -> dict[str, Any]:
    """A size key: a number in the key's unit, or a size string (``9K``)."""
    return {"oneOf": [number, SIZE_TEXT]}


def enum_schema(values) -> dict[str, Any]:
    return {"enum": list(values)}


_enum = enum_schema


def field_types() -> dict[str, Any]:
    """``section.key`` -> JSON Schema of the value (or the name of a section it holds), for every
    key of the scenario's parsers."""
    from sim.catalog import COMPUTE_DTYPES, DEVICE_KINDS, LINK_KINDS, NIC_VENDORS, builtin_catalog
    from sim.codecs import CODEC_PATHS, CODECS
    from sim.config import FIDELITIES, FLOW_ENGINES
    from sim.costs.backends import BACKENDS
    from sim.costs.coordination import NEGOTIATIONS
    from sim.costs.pipeline import STAGE_BALANCES
    from sim.costs.ps import PS_RPCS
    from sim.costs.staleness import STALENESS_PENALTIES
    from sim.frameworks import FRAMEWORKS
    from sim.strategy import (
        COLLECTIVES,
        PRECISIONS,
        PROTOCOLS,
        PS_LAYOUTS,
        PS_MODES,
        PS_PLACEMENTS,
        SCHEDULES,
        STRATEGY_KINDS,
    )
    from sim.topology.spec import PLACEMENTS
    from sim.transformer import FAMILIES
    from sim.workload import DECODER, LAYER_COLUMNS, OPTIMIZERS, TIME_COLUMNS, zoo_names

    catalog = builtin_catalog()
    gpu_name = {"type": "string", "examples": sorted(catalog.gpus)}
    link_name = {"type": "string", "examples": sorted(catalog.links)}
    from sim.catalog import _HOST_KEYS, _LINK_KEYS
    from sim.costs.backends.mpi import GPU_BUFFERS, MPI_LIBRARIES
    from sim.costs.backends.nccl_tables import known_versions
    from sim.costs.input_pipeline import DATA_KINDS, LOADERS
    row_types: dict[str, Any] = {
        "layer": STRING, "name": STRING, "kind": STRING, "param_count": INT_NONNEG, "fwd_flops": NUM_NONNEG,
        "bwd_flops": NUM_NONNEG, "activation_elems": NUM_NONNEG, **{c: NUM_NONNEG for c in TIME_COLUMNS}}
    assert set(row_types) == {*LAYER_COLUMNS, *TIME_COLUMNS, "name"}
    layer_row = {"type": "object", "additionalProperties": False, "properties": row_types}
    return {
        "workload.model": {"type": "string", "examples": [*zoo_names(), DECODER]},
        "workload.batch_size": INT_POS,
        "workload.optimizer": _enum(OPTIMIZERS),
        "workload.layers": {"type": "array", "minItems": 1, "items": layer_row},
        "workload.layers_file": STRING,
        "workload.seq_len": INT_POS,
        "workload.architecture": "architecture",
        "workload.data": _enum(DATA_KINDS),
        "architecture.family": _enum(FAMILIES),
        **{f"architecture.{k}": INT_POS for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len", "vocab",
                                                  "experts_per_token", "moe_ffn_hidden")},
        **{f"architecture.{k}": INT_NONNEG for k in ("experts", "shared_experts", "dense_layers")},
        "architecture.max_positions": INT_NONNEG,
        "architecture.tied_embeddings": BOOL,
        "cluster.gpus": INT_POS, "cluster.nodes": INT_POS, "cluster.gpus_per_node": INT_POS,
        "cluster.gpu": gpu_name, "cluster.intra_link": link_name, "cluster.inter_link": link_name,
        "cluster.nics_per_node": INT_POS, "cluster.host": {"type": "string", "examples": sorted(catalog.hosts)}, "cluster.oversubscription": {"type": "number", "minimum": 1},
        "cluster.topology": _topology(link_name),
        "cluster.placement": {"oneOf": [_enum(PLACEMENTS),
                                        {"type": "array", "items": INT_NONNEG, "uniqueItems": True, "minItems": 1}]},
        "strategy.kind": _enum(STRATEGY_KINDS), "strategy.collective": _enum(COLLECTIVES),
        "strategy.framework": _enum(FRAMEWORKS), "strategy.backend": _enum(BACKENDS),
        "strategy.protocol": _enum(PROTOCOLS),
        "strategy.nccl_socket_nthreads": {"type": "integer", "minimum": 1, "maximum": 16},
        "strategy.nccl_nsocks_perthread": {"type": "integer", "minimum": 1, "maximum": 64},
        "strategy.nccl_version": _enum(known_versions()), "strategy.mpi_library": _enum(MPI_LIBRARIES),
        "strategy.mpi_gpu_buffers": _enum(GPU_BUFFERS),
        "strategy.fusion_mib": size_schema(NUM_POS), "strategy.cycle_time_ms": NUM_NONNEG,
        "strategy.iteration_overhead_ms": NUM_NONNEG,
        "strategy.inter_node_overhead_ms": NUM_NONNEG, "strategy.multi_gpu_overhead_ms": NUM_NONNEG, "strategy.comm_slows_compute": BOOL,
        "strategy.double_buffering": BOOL, "strategy.ps_layout": _enum(PS_LAYOUTS),
        "strategy.negotiation": _enum(NEGOTIATIONS), "strategy.ps_rpc": _enum(PS_RPCS),
        "strategy.root_collective": {"type": "string"}, "strategy.concurrent_collectives": INT_POS,
        "strategy.ps_servers": INT_POS, "strategy.bucket_mib": size_schema(NUM_POS), "strategy.first_bucket_mib": size_schema(NUM_POS),
        "strategy.overlap": BOOL, "strategy.precision": _enum(PRECISIONS), "strategy.codec": _enum(CODECS),
        "strategy.codec_path": _enum(CODEC_PATHS), "strategy.error_feedback": BOOL,
        **{f"strategy.codec_{k}_ns_per_elem": NUM_NONNEG for k in ("reduce", "encode", "decode")},
        "strategy.dp": INT_POS, "strategy.tp": INT_POS, "strategy.pp": INT_POS, "strategy.micro_batches": INT_POS,
        "strategy.schedule": _enum(SCHEDULES), "strategy.stage_balance": _enum(STAGE_BALANCES),
        "strategy.pipeline_overhead_s": NUM_NONNEG, "strategy.ps_mode": _enum(PS_MODES),
        "strategy.ps_placement": _enum(PS_PLACEMENTS), "strategy.staleness_penalty": _enum(STALENESS_PENALTIES),
        "strategy.max_staleness": INT_NONNEG,
        **large_model_fields(),
        "strategy.data_loader": _enum(LOADERS), "strategy.data_workers": {"type": "integer", "minimum": 1, "maximum": 4096},
        "simulation.fidelity": _enum(FIDELITIES), "simulation.seed": INT_NONNEG, "simulation.check_memory": BOOL,
        "simulation.flow_engine": _enum(FLOW_ENGINES),
        "heterogeneity.jitter_cv": NUM_NONNEG, "heterogeneity.slow_nodes": INT_NONNEG,
        "heterogeneity.slow_factor": {"type": "number", "minimum": 1},
        "heterogeneity.mixed_gpus": {"type": "object", "additionalProperties": INT_POS,
                                     "propertyNames": {"examples": sorted(catalog.gpus)}},
        "variability.stragglers": BOOL, "variability.gpu_cv": NUM_NONNEG, "variability.iteration_cv": NUM_NONNEG,
        "faults.fail_rank": INT_NONNEG, "faults.fail_at_s": NUM_NONNEG, "faults.checkpoint_interval_s": NUM_POS,
        "faults.checkpoint_s": NUM_NONNEG, "faults.restart_s": NUM_NONNEG,
        "gpu.peak_tflops": {"type": "object", "additionalProperties": NUM_POS, "propertyNames": _enum(COMPUTE_DTYPES),
                            "required": ["fp32"]},
        "gpu.memory_bandwidth_GBps": NUM_POS, "gpu.memory_GiB": size_schema(NUM_POS), "gpu.efficiency": FRACTION,
        "gpu.launch_overhead_us": NUM_NONNEG, "gpu.kind": _enum(DEVICE_KINDS), "gpu.compute_capability": NUM_POS,
        "gpu.nvlinks": INT_NONNEG, "gpu.sm_count": INT_NONNEG, "gpu.source": STRING,
        "gpu.node": {"type": "object", "additionalProperties": False, "required": ["gpus_per_node", "intra_link",
                     "inter_link", "nics_per_node"],
                     "description": "the server the GPU usually comes in (DGX/HGX): a cluster that does not say "
                                    "otherwise gets its GPUs per node, intra-node link, inter-node link and NICs",
                     # each key as sim.catalog.NodeDesign's field docstring says
                     "properties": {
                         "gpus_per_node": {**INT_POS, "description": "GPUs per server (its DGX / HGX board)."},
                         "intra_link": {**STRING, "description": "The catalog link between its GPUs (NVLink "
                                                                 "generation, through NVSwitch where it has one)."},
                         "inter_link": {**STRING, "description": "The catalog link of its compute NICs."},
                         "nics_per_node": {**INT_POS, "description": "Compute NICs (rail-aligned: one per GPU on DGX "
                                                                     "A100/H100/H200, one per two GPUs on DGX-1)."},
                         "source": {**STRING, "description": "Where the server's figures come from."}}},
        "gpu.base": {"type": "string", "examples": sorted(catalog.gpus)}, "gpu.compute_scale": NUM_POS,
        "gpu.host": {"type": "string", "examples": sorted(catalog.hosts)},
        "link.kind": _enum(LINK_KINDS), "link.bandwidth_Gbps": NUM_POS, "link.bandwidth_GBps": NUM_POS,
        "link.latency_us": NUM_NONNEG, "link.software_latency_us": NUM_NONNEG, "link.efficiency": FRACTION,
        "link.mtu_bytes": size_schema({"type": "integer", "minimum": 53}), "link.per_flow_Gbps": NUM_POS, "link.tcp_window_MiB": size_schema(NUM_POS),
        "link.tcp_stream_Gbps": NUM_POS,
        "link.nic_vendor": _enum(NIC_VENDORS), "link.base": {"type": "string", "examples": sorted(catalog.links)},
        "link.tc": {"type": "object", "additionalProperties": False, "minProperties": 1,
                    "properties": {"rate_Gbps": NUM_POS, "delay_ms": NUM_NONNEG}},
        "link.bandwidth_factor": NUM_POS,
        "link.nccl_protocols": {"type": "object", "additionalProperties": False, "properties": {
            proto: {"type": "object", "additionalProperties": False,
                    "properties": {"bandwidth_factor": NUM_POS, "latency_factor": NUM_POS}}
            for proto in ("LL", "LL128", "Simple")}},
        "link.source": STRING,
        "link.assumed": {"type": "array", "items": _enum(k for k in _LINK_KEYS if k not in ("assumed", "source", "base"))},
        "host.cpu": STRING, "host.cores": {"type": "integer", "minimum": 1, "maximum": 65536},
        "host.tcp_stream_Gbps": NUM_POS, "host.memcpy_GBps": NUM_POS, "host.reduce_GBps": NUM_POS,
        "host.pcie_link": {"type": "string", "examples": sorted(n for n, k in catalog.links.items() if k.kind == "pcie")},
        "host.assumed": {"type": "array", "items": _enum(k for k in _HOST_KEYS if k not in ("assumed", "source"))},
        "host.source": STRING,
    }


def large_model_fields() -> dict[str, Any]:
    """The strategy's large-model fields (sim.strategy.LLM_FIELDS), each with its type and a
    description an editor shows (the framework's own name for it included)."""
    from sim.strategy import ATTENTION, RECOMPUTE, ZERO_STAGES

    def described(schema: dict[str, Any], text: str) -> dict[str, Any]:
        return {**schema, "description": text}

    return {
        "strategy.sequence_parallel": described(BOOL, "Megatron-LM sequence parallelism (--sequence-parallel): with "
                                                "tp > 1 norms and dropouts run on 1/tp of the sequence and each "
                                                "tensor-parallel allreduce becomes a reduce-scatter and an allgather"),
        "strategy.cp": described(INT_POS, "context-parallel degree (Megatron-LM --context-parallel-size): ring "
                                 "attention over cp ranks, each holding seq_len / cp tokens; 2 x cp must divide seq_len"),
        "strategy.ep": described(INT_POS, "expert-parallel degree (Megatron-LM --expert-model-parallel-size): MoE "
                                 "experts split over ep data-parallel ranks, tokens sent by all-to-all; divides dp and "
                                 "the experts"),
        "strategy.vpp": described(INT_POS, "model chunks per pipeline rank (Megatron-LM "
                                  "--virtual-pipeline-model-parallel-size): the interleaved 1F1B schedule when > 1; "
                                  "needs pp > 1, micro_batches a multiple of pp, layers divisible by pp x vpp"),
        "strategy.recompute": described(_enum(RECOMPUTE), "activation recomputation (Megatron-LM "
                                        "--recompute-granularity, torchtitan activation_checkpoint.mode): selective "
                                        "recomputes attention's core, full every transformer block"),
        "strategy.zero_stage": described(_enum(ZERO_STAGES), "ZeRO sharding over the data-parallel ranks (DeepSpeed "
                                         "zero_optimization.stage): 1 optimizer state (Megatron-LM "
                                         "--use-distributed-optimizer), 2 + gradients (FSDP SHARD_GRAD_OP), 3 + "
                                         "parameters (FSDP FULL_SHARD)"),
        "strategy.overlap_param_gather": described(BOOL, "ZeRO-1/2: the allgather of the updated parameters "
                                                   "overlaps the next forward bucket by bucket (Megatron-LM "
                                                   "--overlap-param-gather with --use-distributed-optimizer)"),
        "strategy.overlap_grad_reduce": described(BOOL, "with micro-batches: each gradient bucket's reduction starts "
                                                  "in the last micro-batch's backward (Megatron-LM "
                                                  "--overlap-grad-reduce); not with ZeRO-3"),
        "strategy.attention": described(_enum(ATTENTION), "attention kernels: flash stores no s x s scores (its "
                                        "backward recomputes them), eager stores them; auto: flash on compute "
                                        "capability 8.0 and newer"),
        "strategy.moe_capacity_factor": described(NUM_POS, "mixture of experts: tokens each expert computes, as a "
                                                  "multiple of its balanced share (Megatron-LM "
                                                  "--moe-expert-capacity-factor); absent: dropless"),
    }


def _topology(link_name: dict[str, Any]) -> dict[str, Any]:
    """``cluster.topology``: a kind's name or a fabric file's path, or a mapping (sim.topology.spec)."""
    from sim.topology.spec import _KEYS, KINDS

    per_tier_number = {"oneOf": [{"type": "number", "minimum": 0}, {"type": "array", "items": {"type": "number", "minimum": 0}}]}
    props: dict[str, Any] = {
        "kind": _enum(KINDS), "tiers": _enum([2, 3]), "radix": INT_POS, "oversubscription": per_tier_number,
        "link": link_name, "links": {"type": "array", "items": link_name}, "hop_latency_us": per_tier_number,
        "routing": _enum(["ecmp", "d-mod-k", "first"]), "pods": INT_POS, "leaves": INT_POS, "path": STRING,
    }
    assert set(props) == {key for keys in _KEYS.values() for key in keys}
    return {"oneOf": [{"type": "string", "examples": [k for k in KINDS if k != "file"]},
                      {"type": "object", "additionalProperties": False, "properties": props}]}


def section_keys() -> dict[str, tuple[str, ...]]:
    """Each section's keys, as its parser knows them."""
    from sim.catalog import _GPU_KEYS, _HOST_KEYS, _LINK_KEYS
    from sim.cluster import CLUSTER_KEYS
    from sim.config import SIMULATION_KEYS
    from sim.faults import FAULT_KEYS, HETEROGENEITY_KEYS, VARIABILITY_KEYS
    from sim.strategy import STRATEGY_KEYS
    from sim.transformer import ARCHITECTURE_KEYS
    from sim.workload import WORKLOAD_KEYS

    return {"workload": WORKLOAD_KEYS, "architecture": ARCHITECTURE_KEYS, "cluster": CLUSTER_KEYS,
            "strategy": STRATEGY_KEYS, "simulation": SIMULATION_KEYS, "heterogeneity": HETEROGENEITY_KEYS,
            "faults": FAULT_KEYS, "variability": VARIABILITY_KEYS, "gpu": _GPU_KEYS, "link": _LINK_KEYS,
            "host": _HOST_KEYS}


def section_schema(section: str, types: dict[str, Any] | None = None) -> dict[str, Any]:
    """An object of the section's keys, each with its type and description (sim/schema_docs.py);
    unknown keys are refused, as the parsers do."""
    from sim.schema_docs import describe, description

    types = types or field_types()
    props = {}
    for key in section_keys()[section]:
        value = types[f"{section}.{key}"]
        props[key] = describe({"$ref": f"#/$defs/{value}"} if isinstance(value, str) else value,
                              description(f"{section}.{key}"))
    return {"type": "object", "additionalProperties": False, "properties": props}


def builtin_names() -> dict[str, list[str]]:
    """The names a config may use without a catalog of its own: the zoo's models (and decoder),
    the built-in catalog's GPUs, links and hosts, the codecs."""
    from sim.catalog import builtin_catalog
    from sim.codecs import CODECS
    from sim.workload import DECODER, zoo_names

    catalog = builtin_catalog()
    return {"model": [*zoo_names(), DECODER], "gpu": sorted(catalog.gpus), "link": sorted(catalog.links),
            "host": sorted(catalog.hosts), "codec": list(CODECS)}


def names_as_enums() -> dict[str, Any]:
    """``cluster``'s GPU, link and host names as enums of the built-in catalog, and the
    heterogeneity's GPU types: applied where the file has no ``catalog:`` of its own (a name it
    defines there, or a --catalog file's, is then the loader's to judge)."""
    names = builtin_names()
    return {"cluster": {"properties": {"gpu": _enum(names["gpu"]), "intra_link": _enum(names["link"]),
                                       "inter_link": _enum(names["link"]), "host": _enum(names["host"])}},
            "heterogeneity": {"properties": {"mixed_gpus": {"propertyNames": _enum(names["gpu"])}}}}


def _workload_definition(types: dict[str, Any], section: dict[str, Any]) -> dict[str, Any]:
    """A zoo model's name, or the workload mapping, whose ``model`` is an enum of the zoo unless
    the workload brings its own table (``layers`` or ``layers_file``: then any name)."""
    from sim.schema_docs import describe

    zoo = builtin_names()["model"]
    own_table = {"anyOf": [{"required": ["layers"]}, {"required": ["layers_file"]}]}
    mapping = {**section, "if": own_table, "else": {"properties": {"model": _enum(zoo)}}}
    return describe({"oneOf": [_enum(zoo), mapping]}, "A zoo model's name, or {model, batch_size, ...}: "
                    "the workload (a layer table of your own: layers or layers_file).")


def scenario_definitions() -> dict[str, Any]:
    types = field_types()
    defs = {name: section_schema(name, types) for name in section_keys()}
    defs["workload"] = _workload_definition(types, defs["workload"])
    defs["catalog"] = {"type": "object", "additionalProperties": False, "properties": {
        "gpus": {"type": "object", "additionalProperties": {"$ref": "#/$defs/gpu"}},
        "links": {"type": "object", "additionalProperties": {"$ref": "#/$defs/link"}},
        "hosts": {"type": "object", "additionalProperties": {"$ref": "#/$defs/host"}},
        "calibration": {"type": "object", "additionalProperties": False, "properties": {
            "workload": STRING, "multi_gpu_overhead_ms": NUM_NONNEG, "inter_node_overhead_ms": NUM_NONNEG,
            "overlap": BOOL, "source": STRING}}}}
    return defs


def scenario_properties() -> dict[str, Any]:
    """The top-level keys of a scenario (sim.config.SCENARIO_KEYS), each a reference to its section."""
    from sim.config import SCENARIO_KEYS
    from sim.schema_docs import SECTIONS, describe

    refs = {"name": STRING, "description": STRING}
    for key in SCENARIO_KEYS:
        refs.setdefault(key, {"$ref": f"#/$defs/{key}"})
    return {key: describe(refs[key], SECTIONS.get(key)) for key in SCENARIO_KEYS}


def without_catalog(then: dict[str, Any]) -> dict[str, Any]:
    """``then`` where the document has no ``catalog:`` section."""
    return {"if": {"required": ["catalog"]}, "else": then}


def scenario_schema() -> dict[str, Any]:
    """The scenario file of ``scalebench simulate`` (and of ``real``, which adds a ``real:`` section)."""
    from sim.schema_docs import fill_nested

    return fill_nested({"$schema": SCHEMA_URI, "title": "scalebench scenario (workload, cluster, strategy, simulation)",
                        "type": "object", "required": ["workload"], "additionalProperties": False,
                        "properties": scenario_properties(), **without_catalog({"properties": names_as_enums()}),
                        "$defs": scenario_definitions()})
