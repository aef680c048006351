"""scalebench plan: the best way to train a model on a cluster, searched, explained and checkable.

Every dp x pp x tp layout (tp inside a node unless --max-tp says otherwise), micro-batches and
pipeline schedule, collective library and algorithm, gradient codec and bucket size, for each GPU
count (--gpus, or every sensible count up to --max-gpus); what breaks a rule or does not fit in
memory is counted by reason, the rest simulated on the fast path, ranked by the objective, the
top re-simulated through simulate() to confirm the figures, and optionally in detailed mode
(--verify K). Files: candidates.csv, pareto.png/svg, winner.yaml in --out.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

PLAN_FLAGS = {
    "objective": str, "max_gpus": int, "global_batch": int, "top": int, "max_tp": int, "max_pp": int,
    "max_micro_batches": int, "max_memory_gib": float, "max_candidates": int, "max_cp": int, "max_vpp": int,
    "max_ep": int,
}
LIST_FLAGS = ("backends", "collectives", "codecs", "bucket_mib", "schedules", "zero_stages", "recompute")
SCENARIO_FLAGS = {
    "model": ("workload", "model", str), "batch_size": ("workload", "batch_size", int),
    "seq_len": ("workload", "seq_len", int),
    "gpus": ("cluster", "gpus", int), "gpus_per_node": ("cluster", "gpus_per_node", int), "gpu": ("cluster", "gpu", str),
    "intra_link": ("cluster", "intra_link", str), "inter_link": ("cluster", "inter_link", str),
    "nics_per_node": ("cluster", "nics_per_node", int), "oversubscription": ("cluster", "oversubscription", float),
    "precision": ("strategy", "precision", str),
}
OWN_HELP = {
    "batch_size": "samples per replica per iteration, kept whatever dp is (weak scaling; not with --global-batch); "
                  "default: the model's",
    "gpus": "GPUs to plan for (with --max-gpus: one of the counts tried)",
    "oversubscription": "switch oversubscription (1 = non-blocking)",
    "precision": "compute and gradient dtype: {precisions} (default: fp16 where the GPU computes 16-bit faster, else fp32)",
}
"""Help of the flags whose meaning in a plan differs from sim.flags.SCENARIO_FLAGS' (or that it lacks)."""
FIELD_FLAGS = {f"{section}.{key}": "--" + flag.replace("_", "-") for flag, (section, key, _) in SCENARIO_FLAGS.items()}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", help="YAML: a cluster section, or a scenario (workload, cluster, strategy, "
                        "catalog, plan); flags override it")
    from sim.flags import SCENARIO_FLAGS as SHARED
    from sim.flags import vocabulary

    words = vocabulary()
    scenario = parser.add_argument_group("model and cluster")
    for flag, (_, _, kind) in SCENARIO_FLAGS.items():
        text = OWN_HELP.get(flag) or SHARED[flag][3]
        scenario.add_argument(_flag(flag), dest=flag, type=_typed(_flag(flag), kind), default=None,
                              metavar=kind.__name__.upper() if kind is not str else "NAME", help=text.format(**words))
    scenario.add_argument("--catalog", help="YAML file of extra gpus/links (e.g. from scalebench calibrate)")
    scenario.add_argument("--no-stragglers", dest="stragglers", action="store_false", default=None,
                          help="candidates wait for nobody (variability.stragglers: false; default: every candidate waits "
                               "for the expected slowest of its GPUs, sim/costs/stragglers.py)")
    search = parser.add_argument_group("search")
    search.add_argument("--objective", help="time (default: seconds per sample), gpu_hours, samples_per_s")
    search.add_argument("--global-batch", dest="global_batch", type=_typed("--global-batch", int),
                        help="samples per iteration over all replicas (batch per replica = B / dp); default: keep "
                             "the workload's batch per replica (weak scaling)")
    search.add_argument("--max-gpus", dest="max_gpus", type=_typed("--max-gpus", int),
                        help="also try every sensible GPU count up to this one")
    search.add_argument("--top", type=_typed("--top", int), help="candidates shown (default 5)")
    search.add_argument("--max-tp", dest="max_tp", type=_typed("--max-tp", int), help="largest tensor-parallel degree "
                        "(default: the GPUs of one node)")
    search.add_argument("--max-pp", dest="max_pp", type=_typed("--max-pp", int), help="most pipeline stages")
    search.add_argument("--max-cp", dest="max_cp", type=_typed("--max-cp", int), help="largest context-parallel degree "
                        "(default: a node's GPUs for sequences of 16k tokens or more, else 1)")
    search.add_argument("--max-vpp", dest="max_vpp", type=_typed("--max-vpp", int), help="most model chunks per "
                        "pipeline rank, the interleaved 1F1B schedule (default 4)")
    search.add_argument("--max-ep", dest="max_ep", type=_typed("--max-ep", int), help="largest expert-parallel degree "
                        "(mixture-of-experts models; default: the experts)")
    search.add_argument("--zero-stages", dest="zero_stages", help="comma list of ZeRO stages 0-3 to try (default all; "
                        "the lightest that fits is kept)")
    search.add_argument("--recompute", help="comma list of none, selective, full (default all; the lightest that fits)")
    search.add_argument("--max-micro-batches", dest="max_micro_batches", type=_typed("--max-micro-batches", int),
                        help="most micro-batches per iteration (default: up to the batch per replica)")
    search.add_argument("--max-memory-gib", dest="max_memory_gib", type=_typed("--max-memory-gib", float),
                        help="memory per GPU to plan with (default: the GPU's)")
    search.add_argument("--max-candidates", dest="max_candidates", type=_typed("--max-candidates", int),
                        help="refuse a larger space before simulating (default 1,000,000)")
    search.add_argument("--backends", help="comma list of nccl, gloo, mpi (default: NCCL on GPUs; gloo and MPI on CPUs)")
    search.add_argument("--collectives", help="comma list (default: auto, the library's allreduce algorithms, hierarchical)")
    search.add_argument("--codecs", help="comma list of none, fp16, bf16, fp8_e4m3[:allgather|:reduce_scatter] ... "
                        "(default: none, gradients in the compute precision)")
    search.add_argument("--allow-lossy", dest="allow_lossy", action="store_true", default=None,
                        help="also try codecs narrower than the precision (fp16, fp8): they round every gradient")
    search.add_argument("--bucket-mib", dest="bucket_mib", help="comma list of bucket sizes in MiB (default 5,25,100)")
    search.add_argument("--schedules", help="comma list of gpipe, 1f1b (default both)")
    out = parser.add_argument_group("output")
    out.add_argument("--verify", type=_typed("--verify", int), default=0, metavar="K",
                     help="re-simulate the best K in detailed mode and say whether the ranking holds")
    out.add_argument("--out", help="directory for candidates.csv, pareto.png/svg, winner.yaml "
                     "(default results/plan/<model>-<gpus>x<gpu>)")
    out.add_argument("--format", choices=("table", "json", "csv"), default="table",
                     help="table (default, for people), json (the request, the search, the top candidates, the "
                          "winner and why, one object) or csv (the top candidates' rows) on stdout; progress on stderr")


def _typed(flag: str, kind):
    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a{'n integer' if kind is int else ' number'}") from None
    return parse


def plan_spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    from sim.cluster import CLUSTER_KEYS
    from sim.config import read_yaml
    from sim.errors import ConfigError

    spec: dict[str, Any] = {}
    if args.config:
        from sim.config import resolve_paths

        loaded = resolve_paths(read_yaml(args.config), Path(args.config).parent)
        if not isinstance(loaded, dict):
            raise ConfigError(str(args.config), type(loaded).__name__, "a YAML mapping (a cluster section or a scenario)")
        if set(loaded) <= set(CLUSTER_KEYS) | {"catalog"}:
            loaded = {"cluster": {k: v for k, v in loaded.items() if k != "catalog"},
                      **({"catalog": loaded["catalog"]} if "catalog" in loaded else {})}
        spec = loaded
    for flag, (section, key, _) in SCENARIO_FLAGS.items():
        value = getattr(args, flag)
        if value is None:
            continue
        part = spec.setdefault(section, {})
        if isinstance(part, str):
            part = spec[section] = {"model": part}
        part[key] = value
        if flag == "gpus":
            part.pop("nodes", None)
    if getattr(args, "stragglers", None) is not None:
        variability = spec.get("variability") or {}
        if not isinstance(variability, dict):
            raise ConfigError("variability", variability, "a mapping (--no-stragglers sets variability.stragglers in it)")
        spec["variability"] = {**variability, "stragglers": args.stragglers}
    plan = dict(spec.get("plan") or {})
    if getattr(args, "allow_lossy", None):
        plan["allow_lossy"] = True
    for key in PLAN_FLAGS:
        if getattr(args, key) is not None:
            plan[key] = getattr(args, key)
    for key in LIST_FLAGS:
        text = getattr(args, key)
        if text is not None:
            items = [t.strip() for t in text.split(",") if t.strip()]
            if not items:
                raise ConfigError(_flag(key), text, "a comma-separated list")
            if key == "bucket_mib":
                try:
                    items = [float(t) for t in items]  # type: ignore[misc]
                except ValueError:
                    raise ConfigError("--bucket-mib", text, "comma-separated sizes in MiB (e.g. 5,25,100)") from None
            plan[key] = items
    spec["plan"] = plan
    return spec


MAX_VERIFY = 1000
"""Candidates --verify re-runs in detailed mode at most (assumed: each takes seconds at scale; a
billion meant every candidate, hours, found by scripts/bad_input_driver.py)."""

def run(args: argparse.Namespace) -> int:
    from sim.errors import ConfigError, require_positive

    require_positive("--verify", args.verify, integer=True, allow_zero=True, maximum=MAX_VERIFY,
                     why="detailed re-runs of the best candidates, seconds each")
    try:
        request = _request(args)
    except ConfigError as err:
        raise _named(err) from None
    from scalebench.commands.plan_text import render_plan

    return render_plan(request, args.verify, Path(args.out) if args.out else None, args.format)


def _request(args: argparse.Namespace):
    from sim.catalog import load_catalog_file
    from sim.planner import plan_request_from_dict

    catalog = load_catalog_file(args.catalog) if args.catalog else None
    names = {key: _flag(key) for key in (*PLAN_FLAGS, *LIST_FLAGS, "model", "gpus", "batch_size", "allow_lossy")}
    return plan_request_from_dict(plan_spec_from_args(args), catalog, names)


def _named(err):
    """A scenario field's error names the flag that sets it too."""
    from sim.errors import ConfigError

    flag = FIELD_FLAGS.get(err.field)
    if flag is None:
        return err
    return ConfigError(f"{flag} ({err.field})", err.value, err.allowed)
