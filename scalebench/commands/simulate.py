"""scalebench simulate: one iteration, its breakdown, optionally a timeline trace."""

from __future__ import annotations

import argparse
import sys

from scalebench.commands.common import (
    add_scenario_arguments,
    format_rows,
    scenario_dict_from_args,
    write_out,
)

DEFAULT_SCENARIO = {
    "name": "resnet50-32xv100-ib_edr",
    "workload": {"model": "resnet50"},
    "cluster": {"gpus": 32, "gpus_per_node": 8, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "ib_edr"},
}
"""Without a config: ResNet-50 on 32 V100s over EDR; the strategy's defaults (the library picks
the algorithm: NCCL's tuner on GPUs)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_scenario_arguments(parser, "simulate")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table",
                        help="table (default: the breakdown for people), csv or json (the result row)")
    parser.add_argument("--trace", metavar="FILE.json",
                        help="write a Chrome/Perfetto timeline of the iteration (sim/trace.py's format)")
    parser.add_argument("--links", metavar="FILE.csv",
                        help="detailed fidelity: write every link's bytes, busy time and utilisation")
    parser.add_argument("--link-plot", metavar="STEM",
                        help="detailed fidelity: draw each tier's link utilisation to STEM.png and STEM.svg")
    parser.add_argument("--single-gpu-samples-per-s", type=float, metavar="FLOAT",
                        help="calibrate compute to one measured GPU: its samples/s (scales every layer's roofline time)")
    parser.add_argument("--single-gpu-iteration-time-s", type=float, metavar="SECONDS",
                        help="calibrate compute to one measured GPU: its iteration time in seconds")
    parser.add_argument("--calibration-batch", type=int, metavar="INT",
                        help="the batch the single-GPU figure was measured at (default: the workload's)")
    parser.add_argument("--iterations", type=int, default=None, metavar="N",
                        help="simulate a run of N iterations (stragglers, failures, asynchronous PS) instead of one")


def run(args: argparse.Namespace) -> int:
    from sim.catalog import load_catalog_file
    from sim.config import scenario_columns, scenario_from_dict
    from sim.errors import ConfigError
    from sim.faults import stragglers_line
    from sim.fileio import atomic_write_json, check_writable
    from sim.simulate import simulate
    from sim.trace import chrome_trace

    catalog = load_catalog_file(args.catalog) if args.catalog else None
    spec = scenario_dict_from_args(args, DEFAULT_SCENARIO)
    scenario = scenario_from_dict(spec, catalog)
    notes = _inapplicable(args, spec, scenario)
    calibration = _throughput_calibration(args)
    if calibration:
        from sim.calibration import apply_throughput_calibration

        scenario = apply_throughput_calibration(scenario, calibration)
    if args.trace:
        if args.iterations is not None:
            raise ConfigError("--trace", args.trace, "one iteration's timeline: without --iterations (a run of "
                              "many iterations has no per-layer timeline; drop one of the two)")
        check_writable("--trace", args.trace)
    if args.iterations is not None:
        return _run_many(scenario, args)
    if (args.links or args.link_plot) and scenario.fidelity != "detailed":
        raise ConfigError("--links" if args.links else "--link-plot", args.links or args.link_plot,
                          "only with --fidelity detailed (the fast path simulates no links)")
    if args.links:
        check_writable("--links", args.links)
    if args.link_plot:
        check_writable("--link-plot", f"{args.link_plot}.png")
    result = simulate(scenario)
    from sim.strategy import strategy_notes

    for note in strategy_notes(scenario.strategy, scenario.cluster.world_size):
        print(f"scalebench simulate: note: {note}", file=sys.stderr)
    row = {**scenario_columns(scenario), **result.metrics(), "source": "sim"}
    _say(notes)
    if args.format == "table":
        write_out(breakdown_table({**row, "overhead_time_s": overhead_s(scenario)},
                                  stragglers_line(scenario.variability, scenario.cluster.gpu, scenario.cluster.world_size))
                  + links_table(result, scenario) + fabric_line(scenario))
    else:
        write_out(format_rows([row], args.format))
    if args.trace:
        atomic_write_json(args.trace, chrome_trace(result, scenario))
    if args.links or args.link_plot:
        _write_links(args, result, scenario)
    return 0


def overhead_s(scenario) -> float:
    """The fixed per-iteration costs the scenario pays (strategy.iteration_overhead_s, and a
    calibration's multi-GPU and inter-node overheads where they apply): in the iteration, in no phase."""
    s, c = scenario.strategy, scenario.cluster
    return (s.iteration_overhead_s + (s.multi_gpu_overhead_s if c.world_size > 1 else 0.0)
            + (s.inter_node_overhead_s if c.nodes > 1 else 0.0))
def _inapplicable(args: argparse.Namespace, spec: dict, scenario, prog: str = "simulate") -> list[str]:
    """Settings that do nothing here (sim.config.inapplicable_settings): a flag given on the command
    line is refused (one line naming it), a config file's key gets a note on stderr."""
    from sim.config import inapplicable_settings
    from sim.errors import ConfigError
    from sim.flags import SCENARIO_FLAGS

    flags = {f"{section}.{key}": flag for flag, (section, key, *_) in SCENARIO_FLAGS.items()
             if getattr(args, flag, None) is not None}
    notes = []
    for field, value, why in inapplicable_settings(spec, scenario):
        if field in flags:
            raise ConfigError("--" + flags[field].replace("_", "-"), value, why)
        notes.append(f"scalebench {prog}: note: {field} {value!r} does nothing here: {why}")
    return notes


def _say(notes: list[str]) -> None:
    import sys

    for note in notes:
        print(note, file=sys.stderr)


def fabric_line(scenario) -> str:
    """On the fast path, what it takes from a fabric: the ring's bottleneck share and extra hops."""
    topology = scenario.cluster.topology
    if scenario.fidelity != "fast" or topology is None or topology.fabric.kind == "single_switch":
        return ""
    return (f"\n  fabric {topology.fabric.description}: the fast path sees it as the ring's busiest tier, a NIC's "
            f"rate / {scenario.cluster.oversubscription:.3g}, and {topology.ring_extra_latency_s * 1e6:.3g} us of "
            "switch hops; --fidelity detailed routes every flow on it\n")


def links_table(result, scenario, count: int = 5) -> str:
    """The detailed mode's hottest links and its flow engine, under the breakdown."""
    if not result.links:
        return ""
    from sim.units import human_bytes, human_seconds

    topology = scenario.cluster.topology
    where = topology.fabric.description if topology is not None else "one switch"
    lines = [f"\n  network ({where}; {result.flow_engine} flow engine): hottest links, by bytes over capacity x iteration",
             f"    {'link':<32} {'tier':<11} {'carried':>10} {'capacity':>11} {'used':>7} {'busy for':>11} {'(share)':>7}"]
    for s in result.hottest_links(count):
        lines.append(f"    {s.name:<32} {s.tier:<11} {human_bytes(s.bytes):>10} {s.capacity_Bps * 8 / 1e9:>6.1f} Gb/s "
                     f"{100 * s.utilisation(result.iteration_time_s):5.1f} % {human_seconds(s.busy_s):>11} "
                     f"{100 * s.busy_share(result.iteration_time_s):5.1f} %")
    return "\n".join(lines) + "\n"


def _write_links(args: argparse.Namespace, result, scenario) -> None:
    from pathlib import Path

    from experiments.plots_links import link_rows, plot_link_utilisation
    from sim.fileio import atomic_write_text

    if args.links:
        atomic_write_text(args.links, format_rows(link_rows(result.links, result.iteration_time_s), "csv"))
    if args.link_plot:
        topology = scenario.cluster.topology
        where = topology.fabric.description if topology is not None else "one switch"
        plot_link_utilisation(result.links, result.iteration_time_s,
                              f"{scenario.name}: {result.world_size} GPUs, {where}", Path(args.link_plot))


def _throughput_calibration(args: argparse.Namespace) -> dict | None:
    """The experiments' ``calibration:`` section, from the command line."""
    from sim.errors import ConfigError

    given = {k: v for k, v in (("single_gpu_samples_per_s", args.single_gpu_samples_per_s),
                               ("single_gpu_iteration_time_s", args.single_gpu_iteration_time_s)) if v is not None}
    if len(given) > 1:
        raise ConfigError("--single-gpu-samples-per-s", args.single_gpu_samples_per_s,
                          "one of --single-gpu-samples-per-s, --single-gpu-iteration-time-s")
    if not given:
        if args.calibration_batch is not None:
            raise ConfigError("--calibration-batch", args.calibration_batch,
                              "only with --single-gpu-samples-per-s or --single-gpu-iteration-time-s")
        return None
    if args.calibration_batch is not None:
        given["batch_size"] = args.calibration_batch
    return given


def _run_many(scenario, args: argparse.Namespace) -> int:
    from sim.config import scenario_columns
    from sim.faults import stragglers_line
    from sim.run import check_run_size, simulate_run

    run = simulate_run(scenario, check_run_size(args.iterations, scenario.cluster.world_size, "--iterations"))
    row = {**scenario_columns(scenario), **run.metrics(), "source": "sim"}
    if args.format != "table":
        write_out(format_rows([row], args.format))
        return 0
    hist = run.staleness_histogram
    lines = [
        f"{row['model']} x {run.workers} {row['gpu']}: {run.mode} "
        f"{row['collective']}, {run.iterations} iterations (seed {scenario.seed})",
        f"  wall time          {run.wall_time_s:.6g} s",
        f"  samples/s          {run.samples_per_s:,.0f}",
        f"  effective/s        {run.effective_samples_per_s:,.0f}  (stale updates weighted 1/staleness, Zhang et al. 2016)"
        if scenario.strategy.staleness_penalty == "inverse" else f"  effective/s        {run.effective_samples_per_s:,.0f}",
        f"  updates            {run.updates}",
        f"  staleness          mean {run.staleness_mean:.2f}, max {len(hist) - 1}",
        f"  lost work          {run.lost_work_s:.6g} s, {run.lost_samples:,.0f} samples, {run.restarts} restarts",
        "  " + stragglers_line(scenario.variability, scenario.cluster.gpu).replace(
            "steps wait for the expected slowest rank", "each rank's speed drawn per GPU and iteration"),
    ]
    write_out("\n".join(lines) + "\n")
    return 0


def breakdown_table(row: dict, stragglers: str = "") -> str:
    from sim.units import human_bytes, human_seconds

    it = row["iteration_time_s"]

    def pct(t: float) -> str:
        return f"{100 * t / it:5.1f} %"

    lines = [
        f"{row['model']} x {row['world_size']} {row['gpu']} ({row['nodes']} nodes x {row['gpus_per_node']}), "
        f"intra {row['intra_link']}, inter {row['inter_link']}; {row['strategy']}{_accumulation(row)}"
        f"{', ' + row['framework'] if row.get('framework') else ''}, {row.get('backend', '')} {row['collective']}, "
        f"bucket {row['bucket_mib']:g} MiB, overlap {'on' if row['overlap'] else 'off'}, {row['precision']}, "
        f"batch {row['batch_size']}/{'GPU' if row.get('dp', row['world_size']) == row['world_size'] else 'replica'} "
        f"({row['fidelity']} fidelity)",
        "",
        f"  {'iteration':<26}{human_seconds(it):>12}",
        f"  {'  forward':<26}{human_seconds(row['forward_time_s']):>12}  {pct(row['forward_time_s'])}",
        f"  {'  backward':<26}{human_seconds(row['backward_time_s']):>12}  {pct(row['backward_time_s'])}",
        f"  {'  optimizer step':<26}{human_seconds(row['optimizer_time_s']):>12}  {pct(row['optimizer_time_s'])}",
        f"  {'  exposed communication':<26}{human_seconds(row['exposed_comm_time_s']):>12}  {pct(row['exposed_comm_time_s'])}",
        *([f"  {'  per-iteration overhead':<26}{human_seconds(row['overhead_time_s']):>12}  {pct(row['overhead_time_s'])}"]
          if row.get("overhead_time_s") else []),
        *([f"  {'  slowed by overlap':<26}{human_seconds(row['overlap_slowdown_time_s']):>12}  "
           f"{pct(row['overlap_slowdown_time_s'])}"] if row.get("overlap_slowdown_time_s") else []),
        *([f"  {'  waiting for stragglers':<26}{human_seconds(row['straggler_wait_time_s']):>12}  "
           f"{pct(row['straggler_wait_time_s'])}"] if row.get("straggler_wait_time_s") else []),
        *_input_lines(row, human_seconds, pct),
        f"  {'communication (busy)':<26}{human_seconds(row['comm_time_s']):>12}  {_reductions(row)}",
        f"  {'bytes on intra-node links':<26}{human_bytes(row['bytes_intra']):>12}  (cluster total)",
        f"  {'bytes on inter-node links':<26}{human_bytes(row['bytes_inter']):>12}  (cluster total)",
        *_extra_lines(row, human_seconds, human_bytes, pct),
        "",
        f"  throughput  {row['throughput_samples_per_s']:,.0f} samples/s",
        f"  speedup     {row['speedup']:.1f}x over 1 GPU (weak scaling, same per-GPU batch)",
        f"  efficiency  {100 * row['scaling_efficiency']:.1f} %  (speedup / GPUs; one GPU doing one replica's batch: "
        f"{human_seconds(row['baseline_time_s'])})",
        *([f"  {stragglers}"] if stragglers else []),
    ]
    return "\n".join(lines) + "\n"


def _input_lines(row: dict, human_seconds, pct) -> list[str]:
    """The input pipeline's lines, with real data only: the wait it adds to the step (if any) and
    the host's time per iteration, saying when it bounds the step."""
    data_s, wait_s = row.get("data_time_s") or 0.0, row.get("data_wait_time_s") or 0.0
    if not data_s:
        return []
    lines = [f"  {'  waiting for input':<26}{human_seconds(wait_s):>12}  {pct(wait_s)}"] if wait_s else []
    verdict = "bounds the step" if wait_s else "hidden behind the GPUs"
    lines.append(f"  {'input pipeline (host)':<26}{human_seconds(data_s):>12}  per iteration per node: {verdict}")
    return lines
def _accumulation(row: dict) -> str:
    """Micro-batches without pipeline stages: gradient accumulation, said in the header (the
    result differs from plain data parallelism, issue 29: 98.3 -> 83.2 % without a word)."""
    m = row.get("micro_batches", 1)
    if m <= 1 or row.get("pp", 1) > 1:
        return ""
    return (f" with {m} micro-batches (gradients accumulated, reduced once after the last micro-batch's backward, "
            "not overlapped with it)")


def _reductions(row: dict) -> str:
    if row["buckets"]:
        return f"in {row['buckets']} buckets"
    if row.get("pp", 1) > 1 or row.get("micro_batches", 1) > 1:
        return "after the last micro-batch (each stage's gradients reduced at once)"
    return "in 0 buckets"


def _extra_lines(row: dict, human_seconds, human_bytes, pct) -> list[str]:
    """Lines for the breadth columns, shown only when they apply."""
    lines = []
    large = [f"{name} {row[key]}" for key, name in (("cp", "cp"), ("ep", "ep"), ("vpp", "vpp")) if row.get(key, 1) != 1]
    large += [f"ZeRO {row['zero_stage']}"] if row.get("zero_stage", 0) else []
    large += ["sequence parallel"] if row.get("sequence_parallel") else []
    large += [f"recompute {row['recompute']}"] if row.get("recompute", "none") != "none" else []
    if row.get("tp", 1) > 1 or row.get("pp", 1) > 1 or large:
        lines.append(f"  {'layout dp x pp x tp':<26}{row['dp']} x {row['pp']} x {row['tp']}, "
                     f"{row['micro_batches']} micro-batches{', ' + row['schedule'] if row['schedule'] else ''}"
                     f"{'; ' + ', '.join(large) if large else ''}")
    for key, label in (("bubble_time_s", "pipeline bubble"), ("pp_comm_time_s", "stage sends (busiest)"),
                       ("tp_comm_time_s", "TP collectives"), ("recompute_time_s", "recomputation"),
                       ("model_comm_time_s", "CP/EP/ZeRO-3 comm"), ("codec_time_s", f"codec {row.get('codec', '')}"),
                       ("coordination_time_s", "coordination (busy)")):
        if abs(row.get(key) or 0.0) > 1e-12 and (key != "bubble_time_s" or row.get("pp", 1) > 1):  # not rounding's -0.0
            lines.append(f"  {'  ' + label:<26}{human_seconds(row[key]):>12}  {pct(row[key])}")
    if row.get("memory_bytes"):
        lines.append(f"  {'memory per rank (peak)':<26}{human_bytes(row['memory_bytes']):>12}")
    return lines
