"""The flags of ``scalebench real`` and of ``python -m real`` (the entry torchrun starts), and the
measured row's table: defined here, below the CLI package, so that both can use them
(real/ never imports scalebench/: tests/test_architecture.py)."""

from __future__ import annotations

import argparse

from sim.flags import SCENARIO_FLAGS, add_scenario_arguments, byte_size, scenario_dict_from_args

DEFAULT_SCENARIO = {
    "name": "real",
    "workload": {"model": "small_cnn", "batch_size": 32},
    "cluster": {"gpus": 2},
    "strategy": {"collective": "ring"},
}
"""The cluster's gpu and links are what the harness runs on (real.config.measured_labels)."""
DEFAULT_OUT_DIR = "results/real"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario flags that apply to a measurement (sim.flags) and the harness' own."""
    from real.config import BACKENDS, DEVICES, LINKS, REAL_STRATEGIES, TOPOLOGIES

    add_scenario_arguments(parser, "real")
    g = parser.add_argument_group("real harness")
    g.add_argument("--strategy", dest="real_strategy", metavar="NAME",
                   help=f"the harness' trainer: {', '.join(REAL_STRATEGIES)} (default: what --collective, --ps-mode "
                        "and --pp imply: ddp, ps_sync or ps_async, pipeline)")
    if "real" not in SCENARIO_FLAGS.get("backend", ("", "", str, "", ()))[-1]:  # unless the scenario's serves both
        g.add_argument("--backend", metavar="NAME", help=f"process-group backend: {', '.join(BACKENDS)} "
                       "(gloo on CPU, the default; nccl: one CUDA device per local rank)")
    g.add_argument("--device", choices=DEVICES,
                   help="where the ranks compute: cpu (default with gloo) or cuda (CUDA device LOCAL_RANK modulo "
                        "the devices there are: several gloo ranks may share one GPU; the default with nccl)")
    g.add_argument("--lr", type=float, metavar="FLOAT", help="learning rate (default 0.01)")
    g.add_argument("--threads", type=int, metavar="INT", help="torch threads per rank (default: cores / ranks)")
    g.add_argument("--link", metavar="RATE", help=f"emulate a link in a network namespace (root, tc): {', '.join(LINKS)} "
                   "or any <number>mbit|gbit; default: loopback, unshaped")
    g.add_argument("--topology", default=None, choices=TOPOLOGIES,
                   help="with --link: shared (one tbf for all flows, default) or per_link (htb per connection)")
    g.add_argument("--iterations", type=int, default=None, metavar="N", help="timed iterations per phase (default 20)")
    g.add_argument("--warmup", type=int, default=None, metavar="N", help="untimed iterations first (default 3)")
    g.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="seconds without progress before a run is stopped (default 60)")
    g.add_argument("--out", metavar="FILE", help="write the row(s) to this CSV or JSON file (atomically); training rows "
                   "go to results/real/<model>-<strategy>-<n>-<id>.csv unless given")
    g.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table (default), csv or json on standard output")
    g.add_argument("--trace", metavar="FILE.json", help="also record one iteration's phases on every rank and write "
                   "them as a Chrome/Perfetto timeline (the format of simulate --trace)")
    g.add_argument("--profile", metavar="TRACE.json",
                   help="also profile rank 0's next iterations with torch.profiler (CPU ops and, on CUDA, kernels; "
                        "with_stack) and write the Chrome trace: `scalebench layers MODEL --profile TRACE.json` "
                        "turns it into measured per-layer times")
    g.add_argument("--comm", action="store_true", help="collective microbenchmarks (nccl-tests style) instead of training")
    g.add_argument("--collectives", nargs="+", metavar="NAME",
                   help="with --comm: which collectives (default: all of real/bench_comm.py's COLLECTIVES)")
    g.add_argument("--max-bytes", type=byte_size, default=None, metavar="SIZE",
                   help="with --comm: largest message, e.g. 256M or 1G (default 64M)")
    g.add_argument("--bench", action="store_true", help="the harness benchmark (see real/benchmarks.py)")


DEFAULTS = {"topology": "shared", "iterations": 20, "warmup": 3, "timeout": 60.0, "max_bytes": 64 * 2**20}
"""The harness flags' defaults, filled in by ``apply_defaults`` once ``check_flags`` has seen what was given."""
TRAINING_ONLY = ("model", "batch_size", "collective", "ps_servers", "bucket_mib", "codec", "pp", "micro_batches",
                 "schedule", "ps_mode", "seed", "overlap", "real_strategy", "lr", "trace", "config")
"""Flags of a training measurement: --comm and --bench measure no model."""


def check_flags(args: argparse.Namespace) -> None:
    """A harness flag that does not apply to what was asked is a one-line error, not ignored
    (issue 29: --topology without --link, --comm with --bench, --threads 0 were accepted)."""
    from sim.errors import ConfigError

    def given(dest: str) -> bool:  # --no-overlap stores False; store_true flags default to False
        value = getattr(args, dest, None)
        return value is not None and (value is not False or dest == "overlap")

    def flag(dest: str) -> str:
        return "CONFIG" if dest == "config" else "--" + {"real_strategy": "strategy", "overlap": "no-overlap"}.get(
            dest, dest).replace("_", "-")

    if args.comm and args.bench:
        raise ConfigError("--comm", True, "one of --comm (collective microbenchmarks) and --bench (the harness "
                          "benchmark), not both")
    if args.bench:
        for dest in (*TRAINING_ONLY, "gpus", "threads", "link", "topology", "iterations", "warmup", "timeout",
                     "collectives", "max_bytes", "backend"):
            if given(dest):
                raise ConfigError(flag(dest), getattr(args, dest), "nothing with --bench (it runs its own fixed cases: "
                                  "real/benchmarks.py)")
    if args.comm:
        for dest in TRAINING_ONLY:
            if given(dest):
                raise ConfigError(flag(dest), getattr(args, dest), "nothing with --comm (collective microbenchmarks "
                                  "measure no model: --gpus, --collectives, --max-bytes, --link, --backend apply)")
    else:
        for dest in ("collectives", "max_bytes"):
            if given(dest):
                raise ConfigError(flag(dest), getattr(args, dest), "only with --comm")
    if args.link is not None and not str(args.link).strip():
        raise ConfigError("--link", args.link, "a rate such as 100mbit, 1gbit or 10gbit (leave --link out for the "
                          "unshaped loopback)")
    if given("topology") and not given("link"):
        raise ConfigError("--topology", args.topology, "only with --link (it says how the emulated link is shaped; "
                          "the unshaped loopback has no topology)")
    if given("threads"):
        from sim.errors import require_positive

        require_positive("--threads", args.threads, integer=True, maximum=1024,
                         why="torch threads per rank; leave it out for cores / ranks")


def apply_defaults(args: argparse.Namespace) -> argparse.Namespace:
    for dest, value in DEFAULTS.items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, value)
    return args


REAL_FLAGS = ("real_strategy", "backend", "device", "lr", "threads")
"""Flags that go to the spec's real: section (the harness' options); --schedule, --micro-batches and
--codec are the scenario's and reach the harness through it (real.config.defaults_from_strategy)."""


def spec_from_args(args: argparse.Namespace) -> dict:
    spec = scenario_dict_from_args(args, DEFAULT_SCENARIO)
    if not args.config:  # named after what runs (this machine's CPU over loopback), not the simulator's v100
        from real.config import measured_labels
        from sim.flags import default_name

        cluster = spec.get("cluster") if isinstance(spec.get("cluster"), dict) else {}
        labels = measured_labels(getattr(args, "backend", None) or "gloo", getattr(args, "link", None))
        spec["name"] = default_name({**spec, "cluster": {**cluster, **labels}}).replace(" ", "_")
    real = spec.setdefault("real", {})
    for flag in REAL_FLAGS:
        value = getattr(args, flag, None)
        if value is not None:
            real["strategy" if flag == "real_strategy" else flag] = value
    return spec


def _exposed(row: dict, t) -> str:
    """The exposed communication with its noise; below the noise said so, never a negative time
    (real/measure.py ``exposed_communication``)."""
    value, measured = row.get("exposed_comm_time_s"), row.get("exposed_comm_measured_s")
    noise = t("exposed_comm_noise_s")
    if not isinstance(measured, float) or measured != measured:
        return f"{t('exposed_comm_time_s'):>10}"
    if isinstance(value, float) and value != value:
        return (f"{'-':>10}   not measured: compute alone took {t('exposed_comm_measured_s').lstrip('-')} longer "
                f"than whole iterations, beyond the noise of +-{noise} (the machine's load changed between the phases)")
    if row.get("exposed_comm_below_noise"):
        return f"{'~0':>10}   below the noise: iteration - compute = {t('exposed_comm_measured_s')} +- {noise}"
    return f"{t('exposed_comm_time_s'):>10}   +- {noise}"


def row_table(row: dict) -> str:
    """A measured row for people (scalebench real's table)."""
    from sim.units import human_seconds

    def t(key: str) -> str:
        v = row.get(key)
        return human_seconds(v) if isinstance(v, float) and v == v else "-"

    return "\n".join([
        f"{row['model']} x {row['world_size']} ranks, {row['real_strategy']} ({row['comm_path'] or '-'}), "
        f"bucket {row['bucket_mib']:g} MiB, overlap {'on' if row['overlap'] else 'off'}, batch {row['batch_size']}/rank, "
        f"{row['backend']} on {row['link']}; torch {row['torch_version']}, {row['threads_per_rank']} threads/rank",
        "",
        f"  iteration (slowest rank)  {t('iteration_time_s'):>10}   IQR {t('iteration_time_iqr_s')}",
        f"  compute only              {t('compute_time_s'):>10}   IQR {t('compute_time_iqr_s')}",
        f"    forward / backward / optimizer  {t('forward_time_s')} / {t('backward_time_s')} / {t('optimizer_time_s')}",
        f"  exposed communication     {_exposed(row, t)}",
        f"  communication alone       {t('comm_time_s'):>10}   ({row['buckets']} buckets)",
        f"  1 rank alone (T1)         {t('baseline_time_s'):>10}",
        "",
        f"  throughput  {row['throughput_samples_per_s']:,.1f} samples/s; speedup {row['speedup']:.2f}x; "
        f"efficiency {100 * row['scaling_efficiency']:.1f} % (weak scaling); final loss {row['final_loss']:.4g}",
    ]) + "\n"
