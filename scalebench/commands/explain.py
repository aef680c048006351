"""scalebench explain: where a predicted iteration goes, term by term, beside a measured one.

For a scenario (a config file and/or simulate's flags) and a measured iteration time
(--measured-iteration-s) or throughput (--measured-samples-per-s): compute, compute slowed by
overlapped communication, exposed communication by term, coordination, waiting for stragglers,
the pipeline bubble, each with its share of the prediction, then the measurement and the residual
(measured - predicted, absolute and % of measured): what no modelled term explains. sim/explain.py.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scalebench.commands.common import add_scenario_arguments

    add_scenario_arguments(parser, "simulate")
    measured = parser.add_argument_group("the measurement to explain")
    measured.add_argument("--measured-iteration-s", type=float, metavar="SECONDS",
                          help="the measured time of one iteration (the slowest rank's, as nccl-tests and the harness time it)")
    measured.add_argument("--measured-samples-per-s", type=float, metavar="FLOAT",
                          help="the measured throughput of the whole job (samples/s over all replicas): "
                               "iteration = replicas x batch / throughput")
    parser.add_argument("--single-gpu-samples-per-s", type=float, metavar="FLOAT",
                        help="calibrate compute to one measured GPU: its samples/s (as simulate does)")
    parser.add_argument("--single-gpu-iteration-time-s", type=float, metavar="SECONDS",
                        help="calibrate compute to one measured GPU: its iteration time in seconds")
    parser.add_argument("--calibration-batch", type=int, metavar="INT",
                        help="the batch the single-GPU figure was measured at (default: the workload's)")
    parser.add_argument("--format", choices=("text", "json", "csv"), default="text",
                        help="text (default: for people), json (one object) or csv (one row per term)")


def run(args: argparse.Namespace) -> int:
    from scalebench.commands.simulate import DEFAULT_SCENARIO, _throughput_calibration
    from sim.config import scenario_from_dict
    from sim.errors import ConfigError, require_positive
    from sim.flags import scenario_dict_from_args
    from sim.simulate import simulate

    if args.measured_iteration_s is not None and args.measured_samples_per_s is not None:
        raise ConfigError("--measured-iteration-s", args.measured_iteration_s,
                          "one of --measured-iteration-s, --measured-samples-per-s")
    for flag, value in (("--measured-iteration-s", args.measured_iteration_s),
                        ("--measured-samples-per-s", args.measured_samples_per_s)):
        if value is not None and value == float("inf"):
            raise ConfigError(flag, value, "a finite number > 0")
        if value is not None:
            require_positive(flag, value)
    if args.measured_iteration_s is not None:
        from sim.calibration import MAX_ITERATION_S

        require_positive("--measured-iteration-s", args.measured_iteration_s, maximum=MAX_ITERATION_S,
                         why="seconds per iteration: a day is a typo")
    from sim.catalog import load_catalog_file

    catalog = load_catalog_file(args.catalog) if args.catalog else None
    spec = scenario_dict_from_args(args, DEFAULT_SCENARIO)
    scenario = scenario_from_dict(spec, catalog)
    from scalebench.commands.simulate import _inapplicable, _say

    _say(_inapplicable(args, spec, scenario, "explain"))  # a flag that does nothing is refused, a key noted
    calibration = _throughput_calibration(args)
    if calibration:
        from sim.calibration import apply_throughput_calibration

        scenario = apply_throughput_calibration(scenario, calibration)
    result = simulate(scenario)
    measured = args.measured_iteration_s
    if args.measured_samples_per_s is not None:
        measured = result.replicas * result.batch_size / args.measured_samples_per_s
    launch_s = scenario.cluster.gpu.launch_overhead_s
    if measured is not None and measured < launch_s:  # found by scripts/bad_input_driver.py: 1e30 samples/s ran
        flag = "--measured-samples-per-s" if args.measured_samples_per_s is not None else "--measured-iteration-s"
        value = args.measured_samples_per_s if args.measured_samples_per_s is not None else args.measured_iteration_s
        raise ConfigError(flag, value, f"an iteration of at least one kernel launch on {scenario.cluster.gpu.name} "
                          f"({launch_s * 1e6:g} us, its catalog's launch_overhead_us): this one would take {measured:.3g} s")
    from sim.explain import explain

    explanation = explain(result, measured)
    from scalebench.commands.common import write_out

    write_out(render(scenario, result, explanation, args.format))
    return 0


def render(scenario, result, explanation, fmt: str) -> str:
    from sim.config import scenario_columns
    from sim.faults import stragglers_line

    if fmt == "json":
        import json

        return json.dumps({"scenario": scenario_columns(scenario), **explanation.as_dict(),
                           "stragglers": stragglers_line(scenario.variability, scenario.cluster.gpu,
                                                         scenario.cluster.world_size)}, indent=2) + "\n"
    if fmt == "csv":
        from sim.fileio import format_rows

        p = explanation.predicted_s
        rows = [{"category": t.category, "term": t.name, "seconds": t.seconds,
                 "share_of_predicted": t.seconds / p if p > 0 else 0.0} for t in explanation.terms]
        rows.append({"category": "total", "term": "predicted iteration", "seconds": p, "share_of_predicted": 1.0})
        if explanation.measured_s is not None:
            rows.append({"category": "total", "term": "measured iteration", "seconds": explanation.measured_s,
                         "share_of_predicted": explanation.measured_s / p if p > 0 else 0.0})
            rows.append({"category": "total", "term": "residual (measured - predicted)", "seconds": explanation.residual_s,
                         "share_of_predicted": (explanation.residual_s or 0.0) / p if p > 0 else 0.0})
        return format_rows(rows, "csv")
    return text(scenario, result, explanation)


def text(scenario, result, explanation) -> str:
    from sim.explain import CATEGORIES
    from sim.faults import stragglers_line
    from sim.units import human_seconds

    c, s = scenario.cluster, scenario.strategy
    p = explanation.predicted_s

    def share(t: float) -> str:
        return f"{100 * t / p:6.1f} %" if p > 0 else ""

    lines = [f"{scenario.workload.name} x {c.world_size} {c.gpu.name} ({c.nodes} nodes x {c.gpus_per_node}), intra "
             f"{c.intra_link.name}, inter {c.inter_link.name}; {s.framework or s.kind}, {s.backend} {s.collective}, "
             f"{s.precision}, batch {scenario.workload.batch_size}",
             "", f"  {'where the predicted iteration goes':<52}{'seconds':>12}  {'share':>8}"]
    totals = explanation.totals()
    for category in CATEGORIES:
        members = [t for t in explanation.terms if t.category == category]
        if not members or (totals[category] <= 0 and category not in ("compute",)):
            continue
        lines.append(f"  {category:<52}{human_seconds(totals[category]):>12}  {share(totals[category])}")
        shown = [t for t in members if t.seconds > 0]
        if len(shown) > 1 or category == "waiting for stragglers":
            for t in shown:
                lines.append(f"    {t.name:<50}{human_seconds(t.seconds):>12}  {share(t.seconds)}")
    lines.append(f"  {'predicted iteration':<52}{human_seconds(p):>12}")
    if explanation.measured_s is not None:
        r, rp = explanation.residual_s or 0.0, explanation.residual_percent or 0.0
        lines.append(f"  {'measured iteration':<52}{human_seconds(explanation.measured_s):>12}")
        sign = "+" if r >= 0 else "-"
        lines.append(f"  {'residual (measured - predicted)':<52}{sign + human_seconds(abs(r)):>12}  {rp:+6.1f} % of measured")
        lines.append("  " + ("the measurement is slower than every modelled term: something it pays is missing above"
                             if r > 0 else "the prediction is slower than the measurement: a term above is too large"))
    lines += ["", f"  {stragglers_line(scenario.variability, c.gpu, c.world_size)}"]
    return "\n".join(lines) + "\n"
