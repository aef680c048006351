"""scalebench calibrate: a calibration the simulator loads (``--catalog DIR/catalog.yaml``), from
one of three sources:

- this machine, measured (the default; torch): per-layer compute, co-location, collectives;
- ``--from-nccl-tests FILE...``: your cluster's nccl-tests logs, as pasted (sim/nccl_tests.py),
  fitted per NCCL protocol onto the catalog's links (sim/nccl_tests_fit.py; no torch);
- ``--from-runs FILE...``: your own job measured at small scale (sim/runs_io.py), fitted onto the
  scenario's terms (sim/runs_fit.py; no torch).
"""

from __future__ import annotations

import argparse

from scalebench.commands.common import byte_size, write_out

MEASURE_DEFAULTS = {"models": None, "colocated": [1, 2, 4], "ranks": [2], "links": ["loopback"],
                    "max_bytes": 64 * 2**20, "iterations": 10, "timeout": 60.0, "threads": 1, "step_rounds": 3}
NCCL_TESTS_FLAGS = ("op", "nranks", "nhosts", "intra_link", "inter_link", "nics_per_node", "name", "force")
RUNS_FLAGS = ("config", "gpus_per_node")
DEFAULT_OUT = {"measure": "results/calibration", "nccl_tests": "results/calibration/nccl_tests",
               "runs": "results/calibration/runs"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from-nccl-tests", nargs="+", metavar="FILE",
                        help="instead of measuring here: nccl-tests logs of your cluster (as pasted: prefixes, "
                             "warnings and several tables are fine; or CSV/JSON made of them), fitted per NCCL protocol "
                             "onto the catalog's links (no torch needed)")
    source.add_argument("--from-runs", nargs="+", metavar="FILE",
                        help="instead of measuring here: your own job's iteration times at small scale (scalebench real "
                             "output, a CSV of gpus, gpus_per_node, iteration_s or samples_per_s, or torch profiler "
                             "traces), fitted onto the scenario's terms (no torch needed)")
    parser.add_argument("--config", metavar="SCENARIO.yaml",
                        help="with --from-runs: the scenario the runs are of (workload, cluster, strategy); default: "
                             "the one scalebench real's rows name")
    parser.add_argument("--gpus-per-node", type=int, metavar="INT",
                        help="with --from-runs: GPUs per node of runs that do not say (profiler traces)")
    parser.add_argument("--catalog", help="with --from-runs or --from-nccl-tests: a catalog file of your own gpus/links")
    parser.add_argument("--name", help="with --from-nccl-tests: prefix of the link entries (default nccl_tests)")
    parser.add_argument("--op", help="with --from-nccl-tests: the collective, where the log cannot tell (allreduce, ...)")
    parser.add_argument("--nranks", type=int, help="with --from-nccl-tests: ranks of the run, where the log does not say")
    parser.add_argument("--nhosts", type=int, help="with --from-nccl-tests: hosts of the run, where the log does not say")
    parser.add_argument("--gpu", help="with --from-nccl-tests: the catalog's GPU (default: the logs' device name)")
    parser.add_argument("--intra-link", help="with --from-nccl-tests: the catalog's link inside a node (default: the "
                                             "GPU's: A100 nvlink3, H100/H200 nvlink4, V100 nvlink2 ...)")
    parser.add_argument("--inter-link", help="with --from-nccl-tests over several hosts: the catalog's link between them")
    parser.add_argument("--nics-per-node", type=int, help="with --from-nccl-tests: NICs per host (default 1)")
    parser.add_argument("--force", action="store_true",
                        help="with --from-nccl-tests: keep the fit even where the catalog predicts its own log better")
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="table (default, for people) or the fitted terms as json or csv on stdout")
    parser.add_argument("--out", help="calibration directory to write (default results/calibration, or its "
                                      "nccl_tests/ or runs/ subdirectory)")
    parser.add_argument("--models", nargs="+", help="CPU-sized workloads (default: mlp small_cnn small_transformer)")
    parser.add_argument("--colocated", type=int, nargs="+", help="co-located rank counts to profile (default 1 2 4)")
    parser.add_argument("--ranks", type=int, nargs="+", help="world sizes of the collective benchmarks (default 2)")
    parser.add_argument("--links", nargs="+",
                        help="link settings: loopback (unshaped, the default) and/or 100mbit, 1gbit, 10gbit (needs root and tc)")
    parser.add_argument("--max-bytes", type=byte_size, metavar="SIZE",
                        help="largest collective message, e.g. 256M or 1G (default 64M)")
    parser.add_argument("--iterations", type=int, metavar="N", help="timed repetitions per measurement (default 10)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="seconds without progress before a launch is stopped (default 60)")
    parser.add_argument("--threads", type=int, help="torch threads per rank, the same for every k (default 1)")
    parser.add_argument("--step-rounds", type=int,
                        help="separate launches of the whole-step profile per (model, k); the median one is kept (default 3)")


def _refuse(args: argparse.Namespace, flags: tuple[str, ...], allowed: str) -> None:
    from sim.errors import ConfigError

    for flag in flags:
        value = getattr(args, flag)
        if value not in (None, False):
            raise ConfigError(f"--{flag.replace('_', '-')}", value, f"only {allowed}")


def run(args: argparse.Namespace) -> int:
    measure_flags = tuple(MEASURE_DEFAULTS)
    if args.from_nccl_tests:
        _refuse(args, measure_flags, "when measuring this machine (without --from-nccl-tests)")
        _refuse(args, RUNS_FLAGS, "with --from-runs")
        return _from_nccl_tests(args)
    if args.from_runs:
        _refuse(args, measure_flags, "when measuring this machine (without --from-runs)")
        _refuse(args, (*NCCL_TESTS_FLAGS, "gpu"), "with --from-nccl-tests")
        return _from_runs(args)
    _refuse(args, (*NCCL_TESTS_FLAGS, "gpu", "catalog"), "with --from-nccl-tests")
    _refuse(args, RUNS_FLAGS, "with --from-runs")
    for flag, default in MEASURE_DEFAULTS.items():
        if getattr(args, flag) is None:
            setattr(args, flag, default)
    return _measure(args)


def _measure(args: argparse.Namespace) -> int:
    from scalebench.commands.common import require_torch

    require_torch()
    import sys

    from real.bench_comm import MAX_COMM_BYTES
    from real.calibrate import calibrate
    from real.launch import RunFailed
    from sim.errors import ConfigError, require_positive
    from sim.fileio import check_writable

    for flag, values in (("--colocated", args.colocated), ("--ranks", args.ranks), ("--threads", [args.threads])):
        for k in values:
            require_positive(flag, k, integer=True)
    require_positive("--step-rounds", args.step_rounds, integer=True)
    require_positive("--max-bytes", args.max_bytes, integer=True, maximum=MAX_COMM_BYTES, why="per rank")
    require_positive("--iterations", args.iterations, integer=True)
    require_positive("--timeout", args.timeout)
    if any(n < 2 for n in args.ranks):
        raise ConfigError("--ranks", args.ranks, "world sizes of at least 2")
    if args.models:
        from real.config import _check_model

        for m in args.models:
            _check_model(m)
    links = tuple(None if link == "loopback" else link for link in args.links)
    if any(links):
        from real.netem import check_link

        for link in links:
            if link:
                check_link(link)
    out = args.out or DEFAULT_OUT["measure"]
    check_writable("--out", out, directory=True)  # before minutes of measuring
    from tqdm import tqdm

    ks = len(set(args.colocated) | {1})
    stages = 1 + ks + args.step_rounds * ks + len(links) * len(args.ranks)
    bar = tqdm(total=stages, desc="calibrate", unit="stage", file=sys.stderr, dynamic_ncols=True)

    def progress(message: str) -> None:
        bar.set_postfix_str(message, refresh=False)
        bar.update(1)

    try:
        summary = calibrate(out, models=args.models, colocated=tuple(args.colocated), comm_ranks=tuple(args.ranks),
                            links=links, max_bytes=args.max_bytes, iterations=args.iterations, timeout_s=args.timeout,
                            threads=args.threads, step_rounds=args.step_rounds, progress=progress)
    except RunFailed as err:
        bar.close()
        print(f"scalebench calibrate: run failed: {err}", file=sys.stderr)
        return 1
    bar.close()
    if args.format != "table":
        from scalebench.commands.common import format_rows

        rows = [{"link": n, **v} for n, v in summary["links"].items()]
        rows += [{"colocated_ranks": k, "slowdown": v} for k, v in summary["slowdown"].items()]
        write_out(format_rows(rows, args.format))
        return 0
    slow = ", ".join(f"{k}: {v:.2f}x" for k, v in summary["slowdown"].items())
    links_text = "; ".join(f"{n} {v['bandwidth_GBps']:.3f} GB/s, {v['software_latency_us']:.0f} us/step"
                           for n, v in summary["links"].items())
    write_out(f"calibration written to {summary['dir']}/ (catalog.yaml, device.yaml, links.yaml, comm.csv)\n"
              f"  co-location slowdown per rank: {slow}\n  links: {links_text}\n"
              f"  use: scalebench simulate --catalog {summary['dir']}/catalog.yaml --gpu cpu_local "
              "--intra-link gloo_loopback ...\n")
    return 0


def _check_files(flag: str, paths: list[str]) -> None:
    """Every input file exists and is readable, before anything is imported or fitted."""
    import os

    from sim.errors import ConfigError

    for path in paths:
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ConfigError(flag, path, "a readable file" + (" (it does not exist)" if not os.path.exists(path) else ""))


def _catalog(args: argparse.Namespace):
    from sim.catalog import load_catalog_file

    return load_catalog_file(args.catalog) if args.catalog else None


def _from_nccl_tests(args: argparse.Namespace) -> int:
    """Read every file first (a bad one: one line naming file and line, nothing written), fit,
    then write catalog.yaml and nccl_tests.csv atomically into --out."""
    _check_files("--from-nccl-tests", args.from_nccl_tests)
    import yaml

    from sim.errors import ConfigError, require_positive
    from sim.fileio import atomic_write_text, check_writable
    from sim.nccl_tests import read_nccl_tests_tables
    from sim.nccl_tests_fit import calibrate_nccl_tests

    for flag in ("nranks", "nhosts", "nics_per_node"):
        if getattr(args, flag) is not None:
            require_positive(f"--{flag.replace('_', '-')}", getattr(args, flag), integer=True)
    if args.nranks is not None and args.nranks < 2:
        raise ConfigError("--nranks", args.nranks, "an integer of at least 2 (the ranks of a collective)")
    out = check_writable("--out", args.out or DEFAULT_OUT["nccl_tests"], directory=True)
    catalog = _catalog(args)
    tables = []
    for path in args.from_nccl_tests:
        tables += read_nccl_tests_tables(path, op=args.op, ranks=args.nranks, hosts=args.nhosts)
    name = args.name or "nccl_tests"
    cal = calibrate_nccl_tests(tables, name=name, gpu=args.gpu, intra_link=args.intra_link, inter_link=args.inter_link,
                               nics_per_node=args.nics_per_node or 1, force=args.force, catalog=catalog)
    entries = cal.entries(name)
    atomic_write_text(out / "catalog.yaml", yaml.safe_dump({"links": entries}, sort_keys=False, width=110))
    atomic_write_text(out / "nccl_tests.csv", _rows_csv(cal))
    if args.format != "table":
        from scalebench.commands.common import format_rows

        write_out(format_rows(nccl_tests_term_rows(cal), args.format))
        return 0
    write_out(nccl_tests_report(cal, tables, out, name, args.nics_per_node or 1))
    return 0


def nccl_tests_term_rows(cal) -> list[dict]:
    rows = []
    for fit in cal.links:
        for p in fit.protocols:
            rows.append({"link": fit.name, "base": fit.base, "protocol": p.protocol, "rows": p.rows,
                         "min_bytes": p.min_bytes, "max_bytes": p.max_bytes,
                         "bandwidth_factor": round(p.bandwidth_factor, 6), "latency_factor": round(p.latency_factor, 6),
                         "fitted": "+".join(p.fitted) or "none", "kept": fit.kept,
                         "catalog_error_pct": round(fit.catalog_error_pct, 3), "fit_error_pct": round(fit.fit_error_pct, 3)})
    return rows


def _rows_csv(cal) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["where", "op", "size_bytes", "ranks", "hosts", "link", "protocol",
                                             "measured_s", "catalog_s", "catalog_error_pct", "fit_s", "fit_error_pct"],
                            lineterminator="\n")
    writer.writeheader()
    for r in cal.rows:
        writer.writerow({"where": r.where, "op": r.table.op, "size_bytes": r.size_bytes, "ranks": r.table.ranks,
                         "hosts": r.table.hosts, "link": r.link, "protocol": r.protocol, "measured_s": r.measured_s,
                         "catalog_s": r.catalog_s, "catalog_error_pct": round(100 * (r.catalog_s / r.measured_s - 1), 3),
                         "fit_s": r.fit_s, "fit_error_pct": round(100 * (r.fit_s / r.measured_s - 1), 3)})
    return buf.getvalue()


def _size(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024:
            return f"{n:g}{unit}"
        n /= 1024
    return f"{n:g}T"


def nccl_tests_report(cal, tables, out, name: str, nics: int) -> str:
    lines = [f"read {len(tables)} table(s):"]
    for t in tables:
        sizes = [r.size_bytes for r in t.rows]
        lines.append(f"  {t.where}: {t.op}, {t.ranks} ranks on {t.hosts} host(s)"
                     f"{', ' + t.device if t.device else ''}, {len(t.rows)} sizes {_size(min(sizes))}-{_size(max(sizes))}"
                     f" ({'; '.join(t.notes)})")
    lines.append(f"GPU {cal.gpu}; intra-node link {cal.intra_link}"
                 + (f"; network {cal.inter_link} x {nics} per host" if cal.inter_link else ""))
    lines += [f"  note: {n}" for n in cal.notes]
    for fit in cal.links:
        lines.append("")
        lines.append(f"{fit.name} (the catalog's {fit.base}), fitted to {len(fit.sources)} table(s):")
        lines += [f"  from {s}" for s in fit.sources]
        lines.append(f"  {'protocol':<9}{'rows':>5}  {'sizes':<12}{'bandwidth x':>12}{'latency x':>11}")
        for p in fit.protocols:
            kept_bw = "" if "bandwidth" in p.fitted else " (kept)"
            kept_lat = "" if "latency" in p.fitted else " (kept)"
            lines.append(f"  {p.protocol:<9}{p.rows:>5}  {_size(p.min_bytes) + '-' + _size(p.max_bytes):<12}"
                         f"{p.bandwidth_factor:>12.3f}{kept_bw:<7}{p.latency_factor:>8.3f}{kept_lat}")
        missing = [p.protocol for p in fit.protocols if "latency" not in p.fitted]
        if missing:
            lines.append(f"  no size where latency dominates under {', '.join(missing)}: the catalog's latency kept there")
        lines.append(f"  error on its own rows (mean |predicted - measured| / measured): fit {fit.fit_error_pct:.1f} %, "
                     f"catalog {fit.catalog_error_pct:.1f} % -> {'the fit' if fit.kept == 'fit' else 'the catalog'} kept")
        lines += [f"  flag: {f}" for f in fit.flags]
    entries = cal.entries(name)
    lines.append("")
    lines.append(f"wrote {out}/catalog.yaml ({', '.join(entries)}) and {out}/nccl_tests.csv (every row: measured, "
                 "catalog, fit)")
    inter = f" --inter-link {name}_inter --nodes N" if cal.inter_link else ""
    lines.append(f"use: scalebench collective --catalog {out}/catalog.yaml --gpu {cal.gpu} --intra-link {name}_intra"
                 f"{inter} ...")
    return "\n".join(lines) + "\n"


def _from_runs(args: argparse.Namespace) -> int:
    _check_files("--from-runs", args.from_runs)
    if args.config:
        _check_files("--config", [args.config])
    import yaml

    from sim.config import resolve_paths
    from sim.errors import ConfigError, require_positive
    from sim.fileio import atomic_write_text, check_writable
    from sim.runs_fit import fit_runs
    from sim.runs_io import read_runs
    from sim.yamlio import read_yaml

    if args.gpus_per_node is not None:
        require_positive("--gpus-per-node", args.gpus_per_node, integer=True)
    out = check_writable("--out", args.out or DEFAULT_OUT["runs"], directory=True)
    spec = None
    if args.config:
        from pathlib import Path

        spec = resolve_paths(read_yaml(args.config), Path(args.config).parent)
        if not isinstance(spec, dict):
            raise ConfigError("--config", args.config, "a scenario YAML mapping (workload, cluster, strategy)")
    cluster = (spec or {}).get("cluster") or {}
    workload = (spec or {}).get("workload") or {}
    runs, hint = [], None
    for path in args.from_runs:
        found, hint_here = read_runs(path, gpus_per_node=args.gpus_per_node or cluster.get("gpus_per_node"),
                                     batch_size=workload.get("batch_size") if isinstance(workload, dict) else None)
        runs += found
        hint = hint or hint_here
    if spec is None:
        if hint is None:
            raise ConfigError("--config", None, "the scenario the runs are of (a YAML of workload, cluster, strategy): "
                              "the runs do not name one")
        spec = hint
    spec = {k: v for k, v in spec.items() if k not in ("name", "description")}
    cal = fit_runs(spec, runs, _catalog(args))
    section = cal.catalog_section(_catalog(args))
    atomic_write_text(out / "catalog.yaml", yaml.safe_dump(section, sort_keys=False, width=110))
    atomic_write_text(out / "runs.csv", _runs_csv(cal))
    if args.format != "table":
        from scalebench.commands.common import format_rows

        write_out(format_rows(runs_term_rows(cal), args.format))
        return 0
    write_out(runs_report(cal, out, args.config))
    return 0


def runs_term_rows(cal) -> list[dict]:
    return [{"term": t.name, "value": t.value, "catalog_value": t.catalog_value, "unit": t.unit,
             "identified": t.identified, "sd": t.sd, "share_from_runs": t.share, "runs": t.runs, "note": t.note}
            for t in cal.terms]


def _runs_csv(cal) -> str:
    from sim.fileio import format_rows

    return format_rows([{"where": r.run.where, "gpus": r.run.gpus, "gpus_per_node": r.run.gpus_per_node,
                         "measured_s": r.run.iteration_s, "sd_s": r.run.sd_s, "catalog_s": r.catalog_s,
                         "fit_s": r.fit_s} for r in cal.results], "csv")


def runs_report(cal, out, config: str | None) -> str:
    from sim.units import human_seconds

    w = cal.spec.get("workload") or {}
    c = cal.spec.get("cluster") or {}
    lines = [f"{len(cal.results)} run(s) of {w.get('model', 'the workload') if isinstance(w, dict) else w} on "
             f"{c.get('gpu', '?')} ({cal.intra_link} inside a node, {cal.inter_link} between nodes):"]
    lines.append(f"  {'term':<28}{'fitted':>10}{'catalog':>10}{'sd':>10}{'from runs':>11}  runs / why not")
    for t in cal.terms:
        value = "-" if t.value is None else (("on" if t.value else "off") if isinstance(t.value, bool) else f"{t.value:.4g}")
        catalog = "-" if t.catalog_value is None else (("on" if t.catalog_value else "off")
                                                       if isinstance(t.catalog_value, bool) else f"{t.catalog_value:g}")
        sd = "-" if t.sd is None or not t.identified else f"{t.sd:.3g}"
        share = "-" if t.share is None else f"{100 * t.share:.0f} %"
        where = t.runs if t.identified else f"not identified: {t.note}"
        lines.append(f"  {t.name:<28}{value if t.identified else 'kept':>10}{catalog:>10}{sd:>10}{share:>11}  {where}")
    lines.append("")
    lines.append(f"  {'run':<28}{'measured':>12}{'catalog':>20}{'calibrated':>20}")
    for r in cal.results:
        cat = f"{human_seconds(r.catalog_s)} ({100 * (r.catalog_s / r.run.iteration_s - 1):+.1f} %)"
        fit = f"{human_seconds(r.fit_s)} ({100 * (r.fit_s / r.run.iteration_s - 1):+.1f} %)"
        label = f"{r.run.gpus} GPU(s), {r.run.nodes} node(s)"
        lines.append(f"  {label:<28}{human_seconds(r.run.iteration_s):>12}{cat:>20}{fit:>20}")
    lines.append("")
    lines.append(f"wrote {out}/catalog.yaml (the fitted links replace the scenario's by name; calibration: its terms) "
                 f"and {out}/runs.csv")
    lines.append(f"use: scalebench simulate {config or 'CONFIG'} --catalog {out}/catalog.yaml --gpus 1024   "
                 "(run, plan and explain take --catalog too)")
    return "\n".join(lines) + "\n"
