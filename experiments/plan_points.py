"""An experiment point that is a plan (the config's ``plan:`` section): the search over the point's
workload and cluster, and a row that is the winner's.

The row has the usual config columns (the winner's layout, library, codec: ``dp``, ``tp``, ``pp``,
``micro_batches``, ``schedule``, ``backend``, ``collective``, ``codec``, ``bucket_mib``) and metrics
(the winner simulated through ``sim.simulate.simulate``), plus the search's: ``plan_objective``,
``plan_candidates`` (enumerated), ``plan_simulated``, ``plan_removed`` (reason -> count, JSON),
``plan_runner_up``, ``plan_why``, ``plan_search_s``. A point where no candidate is left keeps
its cluster's columns and says why in ``plan_error``.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from experiments.config import base_catalog
from experiments.tables import axis_title, markdown_table, with_none_labels


def plan_columns(spec: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    from sim.config import scenario_columns
    from sim.planner import NoPlan, plan_request_from_dict, plan_search
    from sim.planner.explain import runner_up, why
    from sim.planner.verify import confirm, scenario_of

    request = plan_request_from_dict({**spec, "plan": options}, base_catalog())
    try:
        result = plan_search(request)
    except NoPlan as err:
        c = request.cluster.with_world_size(request.gpus)
        return {"model": request.workload.name, "gpu": c.gpu.name, "nodes": c.nodes, "gpus_per_node": c.gpus_per_node,
                "intra_link": c.intra_link.name, "inter_link": c.inter_link.name, "world_size": request.gpus,
                "precision": request.precision, "plan_objective": request.objective, "plan_error": str(err)}
    winner = result.winner
    simulated = confirm(result, 1)[0]
    second, _ = runner_up(result)
    return {
        **scenario_columns(scenario_of(result, winner)),
        **simulated.metrics(),
        "plan_objective": request.objective,
        "plan_global_batch": winner.layout.global_batch,
        "plan_time_per_sample_s": winner.time_per_sample_s,
        "plan_gpu_hours_per_1m_samples": winner.gpu_s_per_sample * 1e6 / 3600,
        "plan_candidates": result.enumerated,
        "plan_simulated": result.simulated,
        "plan_removed": json.dumps(result.removed, sort_keys=True),
        "plan_runner_up": second.label() if second else "",
        "plan_why": why(result),
        "plan_search_s": result.wall_s,
        "plan_error": "",
    }


def _large_model_words(r) -> str:
    """The winner's large-model settings away from their defaults ('cp 2, sp, zero 3, ')."""
    words = [f"{name} {int(r[key])}" for key, name in (("cp", "cp"), ("vpp", "vpp"), ("ep", "ep"))
             if key in r and pd.notna(r[key]) and int(r[key]) > 1]
    if str(r.get("sequence_parallel", "")).lower() == "true":
        words.append("sp")
    if "zero_stage" in r and pd.notna(r["zero_stage"]) and int(r["zero_stage"]):
        words.append(f"zero {int(r['zero_stage'])}")
    if r.get("recompute") not in (None, "none", "") and pd.notna(r.get("recompute")):
        words.append(f"recompute {r['recompute']}")
    return ", ".join(words) + (", " if words else "")


def plan_table(df: pd.DataFrame, meta: dict[str, Any]) -> str:
    """One line per point: the swept values, the chosen configuration and what it achieves."""
    axes = [a for a in meta.get("axes", []) if a in df.columns]
    df = with_none_labels(df, axes)
    rows = []
    for _, r in df[df["source"] == "sim"].iterrows():
        row = {axis_title(a): r[a] for a in axes}
        if isinstance(r.get("plan_error"), str) and r["plan_error"]:
            rows.append({**row, "best configuration": f"none: {r['plan_error']}"})
            continue
        codec = (f", {r['codec']} by {r['codec_path']}" if r.get("codec") and r["codec"] != r.get("precision") else "")
        m = int(r["micro_batches"])
        layout = (f"{int(r['world_size'])} GPUs, dp {int(r['dp'])} x pp {int(r['pp'])} x tp {int(r['tp'])}, "
                  f"{m} micro-batch{'es' if m > 1 else ''}{' ' + str(r['schedule']) if int(r['pp']) > 1 else ''}, "
                  f"{_large_model_words(r)}{r['backend']} {r['collective']}{codec}, bucket {r['bucket_mib']:g} MiB")
        rows.append({**row, "best configuration": layout,
                     "iteration": f"{1e3 * r['iteration_time_s']:.1f} ms",
                     "samples/s": f"{r['throughput_samples_per_s']:,.0f}",
                     "simulated": f"{int(r['plan_simulated']):,} of {int(r['plan_candidates']):,}"})
    return markdown_table(rows)
