"""The scenario's command-line flags: one table, SCENARIO_FLAGS, from which ``scalebench simulate``
and ``scalebench real`` (and ``python -m real``, the entry torchrun starts) take what applies to
them, with help text that names the allowed values from the registries that validate them.

It lives in sim/ (argparse only, no torch) so that real/ can use it without importing the CLI
package above it (tests/test_architecture.py); scalebench.commands.common re-exports it.
"""

from __future__ import annotations

import argparse
from typing import Any

from sim.config import resolve_paths
from sim.yamlio import read_yaml

SIM, REAL, BOTH = ("simulate",), ("real",), ("simulate", "real")
# The scenario flags, one line each: flag -> (section, key, type, help, the commands that take it).
# help may name a vocabulary in braces ({models}, {gpus}, ...: vocabulary() below). This table is
# the one place scenario flags are defined: simulate and real add what applies to them from it.
SCENARIO_FLAGS: dict[str, tuple[str, str, Any, str, tuple[str, ...]]] = {
    "model": ("workload", "model", str, "a zoo model: {models} (real: a CPU-sized one; your own: a config with "
              "workload.layers_file from `scalebench layers`)", BOTH),
    "batch_size": ("workload", "batch_size", int, "samples per GPU (per rank) per iteration; default: the model's", BOTH),
    "data": ("workload", "data", str, "what the job reads: {data_kinds} (real images are decoded on the host's "
             "cores and may bound the step; default synthetic)", SIM),
    "seq_len": ("workload", "seq_len", int, "tokens per sample of a transformer model (bert_*, gpt2_*, llama2_*)", SIM),
    "gpus": ("cluster", "gpus", int, "world size (real: ranks started on this machine; default 2)", BOTH),
    "gpus_per_node": ("cluster", "gpus_per_node", int, "GPUs per node", SIM),
    "gpu": ("cluster", "gpu", str, "accelerator: {gpus} (or one from --catalog; `scalebench list gpus`)", SIM),
    "intra_link": ("cluster", "intra_link", str, "link between GPUs of a node: {links} (`scalebench list links`)", SIM),
    "inter_link": ("cluster", "inter_link", str, "link between nodes: {links}", SIM),
    "nics_per_node": ("cluster", "nics_per_node", int, "inter-node NICs per node", SIM),
    "fabric": ("cluster", "topology", str, "cluster.topology: single_switch, fat_tree, rail_optimized (their defaults) "
               "or a fabric YAML file (docs/topology.md)", SIM),
    "placement": ("cluster", "placement", str, "where the nodes sit on the fabric: contiguous or random (seeded)", SIM),
    "framework": ("strategy", "framework", str, "the framework whose mechanisms apply: {frameworks}", SIM),
    "backend": ("strategy", "backend", str, "collective library: {backends} (default: nccl on GPUs, gloo on CPUs)", SIM),
    "protocol": ("strategy", "protocol", str, "NCCL protocol: {protocols} (default auto: NCCL's tuner picks)", SIM),
    "nccl_version": ("strategy", "nccl_version", str, "the NCCL release whose tables run: {nccl_versions} "
                     "(default: the newest)", SIM),
    "mpi_library": ("strategy", "mpi_library", str, "MPI implementation: {mpi_libraries} (default mpich-3)", SIM),
    "mpi_gpu_buffers": ("strategy", "mpi_gpu_buffers", str, "how MPI reaches GPU tensors: {mpi_gpu_buffers} "
                        "(default host_copy: not CUDA-aware, copied through pageable host memory)", SIM),
    "host": ("cluster", "host", str, "the nodes' CPU side (cores, TCP stream, memcpy, reduction rates): {hosts} "
             "(default: the GPU's usual host)", SIM),
    "data_loader": ("strategy", "data_loader", str, "what decodes real images: {loaders} (default: the framework's, "
                    "else pytorch_dataloader)", SIM),
    "data_workers": ("strategy", "data_workers", int, "workers per loader (num_workers, n_processes, preprocess_threads; "
                     "default: the loader's)", SIM),
    "collective": ("strategy", "collective", str, "gradient reduction: {collectives} (real: ps = a parameter server)", BOTH),
    "ps_servers": ("strategy", "ps_servers", int, "parameter-server shards, with --collective ps", BOTH),
    "bucket_mib": ("strategy", "bucket_mib", float, "gradient bucket size in MiB (DDP's bucket_cap_mb; default 25)", BOTH),
    "precision": ("strategy", "precision", str, "compute and gradient dtype: {precisions}", SIM),
    "fidelity": ("simulation", "fidelity", str, "{fidelities}: identical ranks once, or every rank and flow", SIM),
    "codec": ("strategy", "codec", str, "gradient wire format: {codecs} (`scalebench list codecs`)", BOTH),
    "codec_path": ("strategy", "codec_path", str, "how a codec's gradients travel: {codec_paths}", SIM),
    "dp": ("strategy", "dp", int, "data-parallel degree (default: GPUs / (tp x pp))", SIM),
    "tp": ("strategy", "tp", int, "tensor-parallel degree (Megatron-style, inside a node first)", SIM),
    "pp": ("strategy", "pp", int, "pipeline stages (real: every rank one stage)", BOTH),
    "micro_batches": ("strategy", "micro_batches", int, "pipeline micro-batches per iteration (a divisor of the batch)", BOTH),
    "schedule": ("strategy", "schedule", str, "pipeline schedule: {schedules}", BOTH),
    "ps_mode": ("strategy", "ps_mode", str, "parameter-server updates: {ps_modes}", BOTH),
    "ps_placement": ("strategy", "ps_placement", str, "parameter-server layout: {ps_placements}", SIM),
    "seed": ("simulation", "seed", int, "random seed (jitter, faults, data, ECMP hashes, random placement)", BOTH),
    "flow_engine": ("simulation", "flow_engine", str, "detailed fidelity: auto, event (every message) or periodic "
                    "(rings in closed form)", SIM),
    "jitter_cv": ("heterogeneity", "jitter_cv", float, "per-step compute jitter, coefficient of variation (with --iterations)", SIM),
    "gpu_cv": ("variability", "gpu_cv", float, "per-GPU speed spread, coefficient of variation, that synchronous steps "
               "wait on (default 0.0148 for GPUs: Sinha et al. SC'22; 0 for CPUs)", SIM),
    "iteration_cv": ("variability", "iteration_cv", float, "per-rank, per-iteration compute jitter, coefficient of "
                     "variation, that synchronous steps wait on (default 0)", SIM),
}


def vocabulary() -> dict[str, str]:
    """The allowed values that flag help names, from the registries that validate them."""
    from sim.catalog import builtin_catalog
    from sim.codecs import CODEC_PATHS, CODECS
    from sim.config import FIDELITIES
    from sim.costs.backends import BACKENDS
    from sim.costs.backends.mpi import GPU_BUFFERS, MPI_LIBRARIES
    from sim.costs.backends.nccl_tables import known_versions
    from sim.costs.input_pipeline import DATA_KINDS, LOADERS
    from sim.frameworks import FRAMEWORKS
    from sim.strategy import COLLECTIVES, PRECISIONS, PROTOCOLS, PS_MODES, PS_PLACEMENTS, SCHEDULES
    from sim.workload import zoo_names

    catalog = builtin_catalog()
    lists = {"models": zoo_names(), "gpus": sorted(catalog.gpus), "links": sorted(catalog.links),
             "collectives": COLLECTIVES, "precisions": PRECISIONS, "fidelities": FIDELITIES, "codecs": list(CODECS),
             "codec_paths": CODEC_PATHS, "schedules": SCHEDULES, "ps_modes": PS_MODES, "ps_placements": PS_PLACEMENTS,
             "frameworks": list(FRAMEWORKS), "backends": list(BACKENDS), "protocols": PROTOCOLS,
             "nccl_versions": known_versions(), "mpi_libraries": list(MPI_LIBRARIES), "mpi_gpu_buffers": GPU_BUFFERS,
             "hosts": sorted(catalog.hosts), "data_kinds": DATA_KINDS, "loaders": list(LOADERS)}
    return {k: ", ".join(v) for k, v in lists.items()}


def add_scenario_arguments(parser: argparse.ArgumentParser, command: str = "simulate") -> None:
    """The config positional, the SCENARIO_FLAGS that apply to ``command``, --no-overlap and
    (simulate) --catalog."""
    parser.add_argument("config", nargs="?", help="scenario YAML (workload, cluster, strategy); flags override it")
    group = parser.add_argument_group("scenario flags (override the config)")
    words = vocabulary()
    for flag, (_, _, kind, *rest) in SCENARIO_FLAGS.items():
        help_text = str(rest[0]) if rest else ""
        commands = tuple(rest[1]) if len(rest) > 1 else BOTH
        if command not in commands:
            continue
        group.add_argument("--" + flag.replace("_", "-"), dest=flag, type=kind, default=None,
                           metavar=kind.__name__.upper() if kind is not str else "NAME",
                           help=help_text.format(**words) if help_text else f"{flag} (the scenario's key)")
    group.add_argument("--no-overlap", dest="overlap", action="store_false", default=None,
                       help="reduce gradients only after backward ends (default: during backward)")
    if command == "simulate":
        group.add_argument("--no-stragglers", dest="stragglers", action="store_false", default=None,
                           help="every rank at its nominal speed: no waiting for the slowest (variability.stragglers: "
                                "false; default: the expected slowest of N, sim/costs/stragglers.py)")
    if command == "simulate":
        group.add_argument("--catalog", help="YAML file of extra gpus/links (e.g. results/calibration/catalog.yaml "
                                             "from scalebench calibrate)")


def byte_size(text: str) -> int:
    """argparse type of every flag that takes bytes: sim.units.parse_bytes (256M, 1G, 65536)."""
    from sim.errors import ConfigError
    from sim.units import parse_bytes

    try:
        return parse_bytes("size", text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: {err.allowed}") from None


def scenario_dict_from_args(args: argparse.Namespace, default: dict[str, Any]) -> dict[str, Any]:
    from sim.errors import ConfigError

    if args.config:
        from pathlib import Path

        spec = resolve_paths(read_yaml(args.config), Path(args.config).parent)
    else:
        spec = {k: dict(v) if isinstance(v, dict) else v for k, v in default.items()}
    if not isinstance(spec, dict):
        raise ConfigError(str(args.config), "an empty file" if spec is None else type(spec).__name__, "a YAML mapping")
    for flag, (section, key, *_) in SCENARIO_FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            part = spec.setdefault(section, {})
            if part is None:  # `cluster:` with nothing under it
                part = spec[section] = {}
            if isinstance(part, str) and section == "workload":  # workload: resnet50
                part = spec[section] = {"model": part}
            if not isinstance(part, dict):
                raise ConfigError(section, part, f"a mapping (--{flag.replace('_', '-')} sets {section}.{key} in it)")
            part[key] = value
            if flag == "gpus":
                part.pop("nodes", None)
            if flag in ("tp", "pp") and value > 1 and part.get("kind", "data_parallel") == "data_parallel":
                part["kind"] = "hybrid"
    if getattr(args, "overlap", None) is not None:
        strategy = spec.setdefault("strategy", {})
        if strategy is None:
            strategy = spec["strategy"] = {}
        if not isinstance(strategy, dict):
            raise ConfigError("strategy", strategy, "a mapping (--no-overlap sets strategy.overlap in it)")
        strategy["overlap"] = args.overlap
    if getattr(args, "stragglers", None) is not None:
        variability = spec.setdefault("variability", {})
        if variability is None:
            variability = spec["variability"] = {}
        if not isinstance(variability, dict):
            raise ConfigError("variability", variability, "a mapping (--no-stragglers sets variability.stragglers in it)")
        variability["stragglers"] = args.stragglers
    if not args.config:  # the default scenario is named after what the flags made of it
        spec["name"] = default_name(spec)
    return spec


def default_name(spec: dict[str, Any]) -> str:
    """``<model>-<gpus>x<gpu>-<link>`` (the inter-node link when there is more than one node)."""
    w, c = spec.get("workload") or {}, spec.get("cluster") or {}
    model = w.get("model", "layers") if isinstance(w, dict) else str(w)
    gpus, per_node = c.get("gpus", c.get("nodes", 1)), c.get("gpus_per_node", 1)
    link = c.get("inter_link") if isinstance(gpus, int) and isinstance(per_node, int) and gpus > per_node else c.get("intra_link")
    return "-".join(str(p) for p in (model, f"{gpus}x{c.get('gpu', 'v100')}", link) if p)
