"""The GPU check's comparison: what the simulator predicts for what scripts/gpu_check.py
measured, and the report (report.md, comparison.csv). Torch-free: it runs on the GPU machine at
the end of each section and here on any returned gpu_check.json (``gpu_check.py report``), always
with this tree's model, so a later model change re-predicts the same measurements.

Errors are (predicted - measured) / measured, as everywhere in scalebench. Predictions are the
catalog's GPU, uncalibrated (sim/data/gpus.yaml: datasheet peaks, efficiency 0.5, 5 us a layer):
- compute: sim.costs.compute.layer_times_s per row of the case's layer table and the optimizer's
  memory-bound step (optimizer_step_time_s) against the measured step's phases; per layer kind,
  the rows' predicted times against their kernels' times in the profiler trace;
- memory: sim.memory.memory_per_rank (params + grads + optimizer against the measured static
  bytes, activations against the saved tensors, the total against the allocator's peak); with
  checkpointing, the strategy's recomputation setting where the model has one
  (``RECOMPUTE_SETTINGS``), else the same prediction as without (and the report says so);
- interference: sim.costs.contention's slowdown of a compute-bound and a memory-bound loop beside
  the measured interferers (``predicted_slowdown``: sim.costs.contention's per-layer model);
- the harness on CUDA: each step's outcome; the 1-rank NCCL iteration against sim.simulate.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from typing import Any

from sim.errors import ConfigError

FORMAT = "scalebench gpu_check 1"
COMPARISON_COLUMNS = ("section", "case", "quantity", "measured", "predicted", "error", "unit", "note")


def rel_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or not measured or not math.isfinite(predicted):
        return None
    return (predicted - measured) / measured


def catalog_gpu(device_name: str, catalog=None) -> str | None:
    """The catalog entry a CUDA device's name stands for: the longest catalog name that appears in
    it as a word ('NVIDIA H100 80GB HBM3' -> h100, 'NVIDIA H200' -> h200); None if none does."""
    import re

    from sim.catalog import builtin_catalog

    names = (catalog or builtin_catalog()).gpus
    words = set(re.split(r"[^a-z0-9]+", device_name.lower()))
    hits = [n for n in names if n in words]
    return max(hits, key=len) if hits else None


def _scenario(workload: dict[str, Any], gpu: str, precision: str, strategy: dict[str, Any] | None = None,
              gpus: int = 1, **cluster):
    from sim.config import scenario_from_dict

    return scenario_from_dict({
        "name": "gpu_check", "workload": workload,
        "cluster": {"gpus": gpus, "gpu": gpu, **cluster},
        "strategy": {"precision": precision, **(strategy or {})},
        "simulation": {"check_memory": False},
    })


# -- compute -------------------------------------------------------------------------------------

def measured_kernels() -> dict[str, Any]:
    """Strategy settings that describe what the measured torch models run, where the tree's
    strategy has them: attention as explicit matmuls and a softmax that stores the scores
    (real/models/transformers.py), i.e. eager, not FlashAttention."""
    from sim.strategy import STRATEGY_KEYS

    return {"attention": "eager"} if "attention" in STRATEGY_KEYS else {}


def predict_compute(workload: dict[str, Any], gpu: str, dtype: str) -> dict[str, Any]:
    """Per row (forward, backward) and the step's phases the simulator predicts on ``gpu``: the
    roofline per row as one rank's engine takes it (sim.engine.plan.data_parallel_passes where the
    tree has it: attention's and recomputation's arithmetic on top)."""
    from sim.costs.compute import layer_times_s, optimizer_step_time_s
    from sim.strategy import DTYPE_BYTES

    scenario = _scenario(workload, gpu, dtype, measured_kernels())
    w, device = scenario.workload, scenario.cluster.gpu
    times = layer_times_s(w, device, dtype, DTYPE_BYTES[dtype])
    try:
        from sim.engine.plan import data_parallel_passes
    except ImportError:  # a tree whose engine takes the roofline's times as they are
        pass
    else:
        passes = data_parallel_passes(scenario, times)
        times = list(zip(passes.fwd_s, passes.bwd_s, strict=True))
    rows = [{"layer": layer.name, "kind": layer.kind, "fwd_s": f, "bwd_s": b} for layer, (f, b) in zip(w.layers, times, strict=True)]
    optimizer = optimizer_step_time_s(w.param_count, DTYPE_BYTES[dtype], w.optimizer, device)
    fwd, bwd = sum(t[0] for t in times), sum(t[1] for t in times)
    return {"rows": rows, "forward_s": fwd, "backward_s": bwd, "optimizer_s": optimizer, "total_s": fwd + bwd + optimizer,
            "optimizer": w.optimizer, "params": w.param_count}


def compute_comparison(data: dict[str, Any], gpu: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(per case, per layer kind and dtype, per row) comparison rows."""
    cases, per_row = [], []
    kinds: dict[tuple[str, str], dict[str, Any]] = {}
    for case in _section(data, "compute").get("cases", []):
        if case.get("error") or "step" not in case:
            continue
        pred = predict_compute(case["workload"], gpu, case["dtype"])
        step = case["step"]
        measured_fb = step["forward_s"] + step["backward_s"]
        predicted_fb = pred["forward_s"] + pred["backward_s"]
        cases.append({
            "model": case["model"], "dtype": case["dtype"], "batch_size": case["batch_size"],
            "measured_forward_s": step["forward_s"], "measured_backward_s": step["backward_s"],
            "measured_optimizer_s": step["optimizer_s"], "predicted_forward_s": pred["forward_s"],
            "predicted_backward_s": pred["backward_s"], "predicted_optimizer_s": pred["optimizer_s"],
            "error_forward": rel_error(pred["forward_s"], step["forward_s"]),
            "error_backward": rel_error(pred["backward_s"], step["backward_s"]),
            "error_fwd_bwd": rel_error(predicted_fb, measured_fb),
            "error_optimizer": rel_error(pred["optimizer_s"], step["optimizer_s"]),
            "error_step": rel_error(pred["total_s"], step["total_s"]),
            "measured_step_s": step["total_s"], "predicted_step_s": pred["total_s"],
            "achieved_tflops": _achieved(case, measured_fb),
        })
        unit_pred: dict[str, float] = defaultdict(float)
        for row in pred["rows"]:
            unit_pred[row["layer"].split(".", 1)[0]] += row["fwd_s"] + row["bwd_s"]
        unit_errors = [rel_error(unit_pred[u["unit"]], u["fwd_s"] + u["bwd_s"]) for u in case.get("units", [])
                       if u["unit"] in unit_pred]
        cases[-1]["unit_errors"] = unit_errors
        measured_rows = {r["layer"]: r for r in (case.get("layers") or {}).get("rows", [])}
        for row in pred["rows"]:
            got = measured_rows.get(row["layer"])
            if got is None:
                continue
            m, p = got["fwd_s"] + got["bwd_s"], row["fwd_s"] + row["bwd_s"]
            per_row.append({"model": case["model"], "dtype": case["dtype"], "batch_size": case["batch_size"],
                            "layer": row["layer"], "kind": row["kind"], "measured_s": m, "predicted_s": p,
                            "error": rel_error(p, m)})
            k = kinds.setdefault((row["kind"], case["dtype"]), {"kind": row["kind"], "dtype": case["dtype"], "rows": 0,
                                                                "measured_s": 0.0, "predicted_s": 0.0, "models": set()})
            k["rows"] += 1
            k["measured_s"] += m
            k["predicted_s"] += p
            k["models"].add(case["model"])
    by_dtype_total: dict[str, float] = defaultdict(float)
    for k in kinds.values():
        by_dtype_total[k["dtype"]] += k["measured_s"]
    kind_rows = []
    for k in sorted(kinds.values(), key=lambda k: (k["dtype"], -k["measured_s"])):
        kind_rows.append({**k, "models": ", ".join(sorted(k["models"])), "error": rel_error(k["predicted_s"], k["measured_s"]),
                          "share": k["measured_s"] / by_dtype_total[k["dtype"]] if by_dtype_total[k["dtype"]] else None})
    return cases, kind_rows, per_row


def _achieved(case: dict[str, Any], seconds: float) -> float | None:
    flops = case.get("flops")
    return flops / seconds / 1e12 if flops and seconds > 0 else None


# -- memory --------------------------------------------------------------------------------------

RECOMPUTE_SETTINGS = (("recompute", "full"), ("recompute_granularity", "full"), ("activation_recomputation", "full"),
                      ("activation_checkpointing", True))
"""Strategy keys a memory model may take for recomputing every block's activations (strategy.recompute:
full, Megatron's --recompute-granularity full, first); the first the tree's strategy accepts is used."""


def recompute_setting() -> tuple[str, Any] | None:
    from sim.strategy import STRATEGY_KEYS

    for key, value in RECOMPUTE_SETTINGS:
        if key in STRATEGY_KEYS:
            return key, value
    return None


def predict_memory(workload: dict[str, Any], gpu: str, precision: str, checkpointing: bool) -> dict[str, Any]:
    """sim.memory.memory_per_rank's breakdown, as the allocator sees it: what it allocates (the model
    state, stored activations, a recomputed block) against max_memory_allocated; that plus the
    fragmentation the model reserves against max_memory_reserved. The CUDA context and NCCL's
    buffers are outside torch's allocator (no counterpart measured)."""
    from sim.memory import memory_per_rank

    setting = recompute_setting() if checkpointing else None
    strategy = {**measured_kernels(), **({setting[0]: setting[1]} if setting else {})}
    breakdown = memory_per_rank(_scenario(workload, gpu, precision, strategy))[0]
    parts = breakdown.parts()
    outside = sum(parts.get(k, 0.0) for k in ("CUDA context", "NCCL buffers"))
    fragmentation = parts.get("fragmentation", 0.0)
    allocated = breakdown.total_bytes - outside - fragmentation
    return {"static_bytes": breakdown.params_bytes + breakdown.grads_bytes + breakdown.optimizer_bytes,
            "activations_bytes": breakdown.activations_bytes + breakdown.stash_bytes,
            "allocated_bytes": allocated, "reserved_bytes": allocated + fragmentation,
            "total_bytes": breakdown.total_bytes, "parts": parts,
            "recompute": f"{setting[0]}: {setting[1]}" if setting else ("not modelled" if checkpointing else "")}


def memory_comparison(data: dict[str, Any], gpu: str) -> list[dict[str, Any]]:
    rows = []
    for case in _section(data, "memory").get("cases", []):
        base = {k: case.get(k) for k in ("model", "precision", "batch_size", "checkpointing")}
        if case.get("error"):
            rows.append({**base, "error_text": case["error"]})
            continue
        pred = predict_memory(case["workload"], gpu, case["precision"], case["checkpointing"])
        peak = case.get("peak_allocated_bytes")
        rows.append({
            **base, "measured_static_bytes": case["static_bytes"], "predicted_static_bytes": pred["static_bytes"],
            "error_static": rel_error(pred["static_bytes"], case["static_bytes"]),
            "measured_activations_bytes": case["saved_activation_bytes"],
            "predicted_activations_bytes": pred["activations_bytes"],
            "error_activations": rel_error(pred["activations_bytes"], case["saved_activation_bytes"]),
            "measured_peak_bytes": peak, "predicted_allocated_bytes": pred["allocated_bytes"],
            "error_peak": rel_error(pred["allocated_bytes"], peak),
            "measured_reserved_bytes": case.get("peak_reserved_bytes"), "predicted_reserved_bytes": pred["reserved_bytes"],
            "error_reserved": rel_error(pred["reserved_bytes"], case.get("peak_reserved_bytes")),
            "predicted_total_bytes": pred["total_bytes"], "recompute": pred["recompute"],
        })
    return rows


# -- interference --------------------------------------------------------------------------------

def model_channels(gpu: str) -> dict[str, Any]:
    """NCCL's run-time ring channels the model puts on this GPU in its usual node (8 GPUs over
    NVLink 4), the SMs they hold, and the slowdown sim.costs.contention gives a compute-bound
    kernel of many waves while they run (``wave_ratio(None, ...)``: S / (S - c); a kernel of few
    waves loses more, a memory-bound one loses bandwidth instead: the table's rows)."""
    from sim.costs.backends.nccl import ring_graph
    from sim.costs.contention import wave_ratio

    scenario = _scenario({"model": "resnet50"}, gpu, "bf16", {"backend": "nccl", "comm_slows_compute": True},
                         gpus=8, gpus_per_node=8, intra_link="nvlink4")
    channels = ring_graph(scenario.cluster).runtime_channels
    sms = scenario.cluster.gpu.sm_count
    return {"channels": channels, "sms": sms, "node": "8 GPUs, nvlink4",
            "slowdown": wave_ratio(None, 1, sms, channels) - 1.0}


def predicted_slowdown(loop: str, interferer: str, channels: int, interferer_Bps: float | None,
                       result: dict[str, Any], gpu: str) -> tuple[float, str]:
    """(slowdown, which model) of ``loop`` ('gemm' or 'stream') beside the interferer, by
    sim.costs.contention as the event layer applies it to a layer: ``contention_factor`` of the
    loop's roofline (its GEMM's thread blocks in waves on the SMs left, its bytes at the bandwidth
    left) beside a footprint of the blocks the interferer holds (``hold``, ``reduce_copy``: one
    per channel, as NCCL) and the memory traffic it was measured to move (``reduce_copy``,
    ``copies``)."""
    from sim.catalog import builtin_catalog
    from sim.costs import contention

    device = builtin_catalog().gpu(gpu)
    sms = result.get("sms") or device.sm_count
    held = channels if interferer in ("hold", "reduce_copy") else 0
    traffic = interferer_Bps if interferer in ("reduce_copy", "copies") and interferer_Bps else 0.0
    footprint = contention.Footprint(min(held, sms - 1), traffic, sms, device.memory_bandwidth_Bps)
    load = _pass_load(loop, result, device, contention)
    return contention.contention_factor(load, footprint) - 1.0, "SMs (waves) and memory bandwidth"


def _pass_load(loop: str, result: dict[str, Any], device, contention):
    """The loop as one pass of the roofline: the GEMM loop's n^3 products (compute) and its three
    n x n operands per product (memory), its grid the tile's blocks over n x n outputs; the stream
    loop all memory."""
    if loop == "gemm":
        g = result["gemm"]
        n, reps = g["dim"], g["reps"]
        elem = 4 if g["dtype"] == "fp32" else 2
        compute_s = g["flops"] / (device.flops_for(g["dtype"]) * device.efficiency)
        memory_s = 3 * n * n * elem * reps / device.memory_bandwidth_Bps
        tile = contention.gemm_tile(device.compute_capability, g["dtype"])
        return contention.PassLoad(compute_s, memory_s, 0.0, ((1.0, contention.gemm_blocks(n * n, tile)),),
                                   tile.blocks_per_sm)
    s = result["stream"]
    return contention.PassLoad(0.0, s["bytes"] / device.memory_bandwidth_Bps)


def interference_comparison(data: dict[str, Any], gpu: str) -> list[dict[str, Any]]:
    section = _section(data, "interference")
    result = section.get("result")
    if not result:
        return []
    rows = []
    for config in result.get("configs", []):
        for loop in ("gemm", "stream"):
            if f"{loop}_slowdown" not in config:
                continue
            predicted, model = predicted_slowdown(loop, config["interferer"], config["channels"],
                                                  config.get(f"{loop}_interferer_Bps"), result, gpu)
            rows.append({"interferer": config["interferer"], "channels": config["channels"], "loop": loop,
                         "measured_slowdown": config[f"{loop}_slowdown"], "predicted_slowdown": predicted,
                         "interferer_GBps": (config.get(f"{loop}_interferer_Bps") or 0) / 1e9 or None,
                         "outlasted": config.get(f"{loop}_interferer_outlasted"), "model": model})
    return rows


# -- harness -------------------------------------------------------------------------------------

def harness_comparison(data: dict[str, Any], gpu: str) -> list[dict[str, Any]]:
    rows = []
    for step in _section(data, "harness").get("steps", []):
        measured = step.get("iteration_time_s")
        row = {"step": step["name"], "status": step.get("status"), "elapsed_s": step.get("elapsed_s"),
               "summary": step.get("summary", ""), "measured": measured, "predicted": None, "error": None}
        if step.get("predict") and measured:
            try:
                row["predicted"] = _predict_iteration(step["predict"], gpu)
                row["error"] = rel_error(row["predicted"], measured)
            except ConfigError as err:
                row["summary"] += f"; no prediction ({err})"
        rows.append(row)
    return rows


def _predict_iteration(spec: dict[str, Any], gpu: str) -> float:
    from sim.simulate import simulate

    scenario = _scenario(spec["workload"], gpu, spec.get("precision", "fp32"), {"backend": "nccl"})
    return float(simulate(scenario).metrics()["iteration_time_s"])


# -- the report ----------------------------------------------------------------------------------

def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    return (data.get("sections") or {}).get(name) or {}


def check_format(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("meta"), dict):
        raise ConfigError(where, type(data).__name__ if not isinstance(data, dict) else data.get("format"),
                          f"a gpu_check.json written by scripts/gpu_check.py (format '{FORMAT}')")
    return data


def prediction_gpu(data: dict[str, Any], override: str | None = None) -> str:
    """The catalog GPU the predictions use: ``override``, the device's catalog entry, or (dry run
    on a CPU) the catalog's 'cpu' placeholder."""
    from sim.catalog import builtin_catalog

    catalog = builtin_catalog()
    if override:
        catalog.gpu(override, "--gpu")
        return override
    meta = data["meta"]
    name = catalog_gpu(meta.get("device", ""), catalog)
    if name is None:
        if meta.get("dry_run"):
            return "cpu"
        raise ConfigError("device", meta.get("device"), f"a GPU of the catalog ({', '.join(catalog.gpus)}), or --gpu NAME")
    return name


def comparisons(data: dict[str, Any], gpu: str) -> dict[str, Any]:
    """Every comparison, each section on its own: one that cannot be predicted says why."""
    out: dict[str, Any] = {"gpu": gpu, "errors": {}}
    for name, fn in (("compute", compute_comparison), ("memory", memory_comparison),
                     ("interference", interference_comparison), ("harness", harness_comparison)):
        try:
            out[name] = fn(data, gpu)
        except ConfigError as err:
            out[name] = [] if name != "compute" else ([], [], [])
            out["errors"][name] = str(err)
    return out


def comparison_csv(comp: dict[str, Any]) -> str:
    """One row per compared quantity (COMPARISON_COLUMNS)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COMPARISON_COLUMNS, lineterminator="\n")
    writer.writeheader()

    def put(section, case, quantity, measured, predicted, unit, note=""):
        writer.writerow({"section": section, "case": case, "quantity": quantity, "measured": _num(measured),
                         "predicted": _num(predicted), "error": _num(rel_error(predicted, measured)), "unit": unit,
                         "note": note})

    cases, kinds, per_row = comp["compute"]
    for c in cases:
        name = f"{c['model']} {c['dtype']} b{c['batch_size']}"
        for phase in ("forward", "backward", "optimizer"):
            put("compute", name, phase, c[f"measured_{phase}_s"], c[f"predicted_{phase}_s"], "s")
    for k in kinds:
        put("compute kind", f"{k['kind']} {k['dtype']}", "layer time", k["measured_s"], k["predicted_s"], "s", k["models"])
    for r in per_row:
        put("compute layer", f"{r['model']} {r['dtype']} b{r['batch_size']}", r["layer"], r["measured_s"], r["predicted_s"], "s",
            r["kind"])
    for m in comp["memory"]:
        name = f"{m['model']} {m['precision']} b{m['batch_size']}{' ckpt' if m['checkpointing'] else ''}"
        if "error_text" in m:
            put("memory", name, "run", None, None, "", m["error_text"])
            continue
        put("memory", name, "params+grads+optimizer", m["measured_static_bytes"], m["predicted_static_bytes"], "B")
        put("memory", name, "activations", m["measured_activations_bytes"], m["predicted_activations_bytes"], "B",
            m["recompute"])
        put("memory", name, "peak allocated", m["measured_peak_bytes"], m["predicted_allocated_bytes"], "B")
        put("memory", name, "peak reserved", m["measured_reserved_bytes"], m["predicted_reserved_bytes"], "B",
            "predicted: allocated + the caching allocator's fragmentation")
    for i in comp["interference"]:
        put("interference", f"{i['interferer']} {i['channels']}", f"{i['loop']} slowdown", i["measured_slowdown"],
            i["predicted_slowdown"], "fraction", i["model"])
    for h in comp["harness"]:
        put("harness", h["step"], f"iteration ({h['status']})", h["measured"], h["predicted"], "s", h["summary"])
    return buf.getvalue()


def _num(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} %"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3f}"


def _fixed(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _sig(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _share(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def _bytes(v: float | None) -> str:
    from sim.units import human_bytes

    return "-" if v is None else human_bytes(v)


def _mape(values: list[float | None]) -> str:
    got = [abs(v) for v in values if v is not None]
    return f"{100 * sum(got) / len(got):.1f} %" if got else "-"


def render_report(data: dict[str, Any], comp: dict[str, Any]) -> str:
    meta = data["meta"]
    gpu = comp["gpu"]
    out = [f"# GPU check: {meta.get('device', '?')} ({meta.get('date', '?')})", ""]
    if meta.get("dry_run"):
        out += ["**Dry run on the CPU**: every section ran with tiny stand-ins and the wall clock; the numbers show "
                "that the pipeline works, not how any GPU performs.", ""]
    out += [f"Predicted with this tree's model for the catalog's `{gpu}` (uncalibrated). Errors are (predicted - "
            "measured) / measured.", "",
            "| | |", "|---|---|"]
    for key in ("command", "git_revision", "torch", "cuda", "nccl", "cudnn", "driver", "sms", "memory_bytes",
                "precision_flags", "budget_s", "elapsed_s"):
        if meta.get(key) not in (None, ""):
            value = _bytes(meta[key]) if key == "memory_bytes" else meta[key]
            out.append(f"| {key} | {value} |")
    out.append("")
    statuses = ", ".join(f"{name} {sec.get('status', 'not run')}"
                         + (f" ({sec['elapsed_s']:.0f} s)" if isinstance(sec.get("elapsed_s"), (int, float)) else "")
                         for name, sec in (data.get("sections") or {}).items())
    out += [f"Sections: {statuses or 'none'}.", ""]
    out += _compute_md(data, comp) + _memory_md(comp) + _interference_md(data, comp) + _harness_md(comp)
    problems = [f"- {name}: {err}" for name, err in comp["errors"].items()]
    for name, sec in (data.get("sections") or {}).items():
        if sec.get("error"):
            problems.append(f"- {name}: {sec['error']}")
        for config in (sec.get("result") or {}).get("configs", []):
            if config.get("error"):
                problems.append(f"- {name} {config['interferer']} {config['channels']}: {config['error']}")
        for case in sec.get("cases", []):
            if case.get("error"):
                label = " ".join(str(case.get(k)) for k in ("model", "dtype", "precision", "batch_size") if case.get(k) is not None)
                problems.append(f"- {name} {label}: {case['error']}")
    if problems:
        out += ["## What did not run or could not be compared", "", *problems, ""]
    return "\n".join(out) + "\n"


def _compute_md(data: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    cases, kinds, _ = comp["compute"]
    if not cases:
        return ["## Compute", "", "Nothing measured.", ""]
    out = ["## Compute: measured steps against the roofline", "",
           "Whole training steps (forward + loss, backward, optimizer step), the mean of the timed steps "
           f"({_clock(data)}); predicted: every row's roofline time + 5 us per layer pass, the optimizer's memory-bound "
           "update.", "",
           "| model | dtype | batch | measured fwd / bwd / opt (ms) | predicted fwd / bwd / opt (ms) | fwd+bwd error | "
           "optimizer error | achieved TFLOP/s |", "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        out.append(f"| {c['model']} | {c['dtype']} | {c['batch_size']} | {_ms(c['measured_forward_s'])} / "
                   f"{_ms(c['measured_backward_s'])} / {_ms(c['measured_optimizer_s'])} | {_ms(c['predicted_forward_s'])} / "
                   f"{_ms(c['predicted_backward_s'])} / {_ms(c['predicted_optimizer_s'])} | {_pct(c['error_fwd_bwd'])} | "
                   f"{_pct(c['error_optimizer'])} | {_sig(c['achieved_tflops'])} |")
    dtypes = sorted({c["dtype"] for c in cases})
    out += ["", "Per model (both batch sizes): MAPE of the step's forward + backward, and of each top-level unit's "
            "forward + backward timed alone on a detached input (the same clock; a unit's predicted time is its rows'"
            ").", "", "| model | " + " | ".join(f"{d} step | {d} units" for d in dtypes) + " |",
            "|---|" + "---|---|" * len(dtypes)]
    for model in dict.fromkeys(c["model"] for c in cases):
        cells = []
        for d in dtypes:
            mine = [c for c in cases if c["model"] == model and c["dtype"] == d]
            cells += [_mape([c["error_fwd_bwd"] for c in mine]), _mape([e for c in mine for e in c["unit_errors"]])]
        out.append(f"| {model} | " + " | ".join(cells) + " |")
    out += ["", "## Which layer kinds the roofline gets wrong", "",
            "Each row's kernels in the profiler trace (forward + backward, real/kineto.py), summed over every model and "
            "batch, against the rows' predicted times; share: of all measured layer time in that dtype.", "",
            "| kind | dtype | rows | models | measured (ms) | predicted (ms) | error | share |", "|---|---|---|---|---|---|---|---|"]
    for k in kinds:
        out.append(f"| {k['kind']} | {k['dtype']} | {k['rows']} | {k['models']} | {_ms(k['measured_s'])} | "
                   f"{_ms(k['predicted_s'])} | {_pct(k['error'])} | "
                   f"{_share(k['share'])} |")
    return out + [""]


def _clock(data: dict[str, Any]) -> str:
    for case in _section(data, "compute").get("cases", []):
        if case.get("clock"):
            return case["clock"]
    return "?"


def _memory_md(comp: dict[str, Any]) -> list[str]:
    rows = comp["memory"]
    if not rows:
        return []
    out = ["## Memory: a training step against sim/memory.py", "",
           "Static: parameters, gradients and optimizer state after a step (their storages); activations: what autograd "
           "saved for backward (and, with checkpointing, each block's kept input); peak: torch.cuda.max_memory_allocated "
           "over the step against what the model allocates, and max_memory_reserved against that plus the fragmentation "
           "it reserves (GPU only; the CUDA context is outside both).", "",
           "| model | precision | batch | checkpointing | static measured / predicted | activations measured / predicted "
           "| error | peak allocated measured / predicted | error | peak reserved measured / predicted | error |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in rows:
        if "error_text" in m:
            out.append(f"| {m['model']} | {m['precision']} | {m['batch_size']} | {'yes' if m['checkpointing'] else 'no'} | "
                       f"{m['error_text']} | | | | | | |")
            continue
        ckpt = ("yes (" + m["recompute"] + ")") if m["checkpointing"] else "no"
        out.append(f"| {m['model']} | {m['precision']} | {m['batch_size']} | {ckpt} | {_bytes(m['measured_static_bytes'])} / "
                   f"{_bytes(m['predicted_static_bytes'])} | {_bytes(m['measured_activations_bytes'])} / "
                   f"{_bytes(m['predicted_activations_bytes'])} | {_pct(m['error_activations'])} | "
                   f"{_bytes(m['measured_peak_bytes'])} / {_bytes(m['predicted_allocated_bytes'])} | {_pct(m['error_peak'])} | "
                   f"{_bytes(m['measured_reserved_bytes'])} / {_bytes(m['predicted_reserved_bytes'])} | "
                   f"{_pct(m['error_reserved'])} |")
    return out + [""]


def _interference_md(data: dict[str, Any], comp: dict[str, Any]) -> list[str]:
    rows = comp["interference"]
    section = _section(data, "interference")
    if not rows:
        return []
    result = section.get("result") or {}
    g, s = result.get("gemm", {}), result.get("stream", {})
    out = ["## Interference: compute beside communication kernels", "",
           f"GEMM loop: {g.get('reps')} x {g.get('dim')}^3 {g.get('dtype')} alone {_ms(g.get('alone_s'))} ms; stream loop "
           f"(z = x + y): {s.get('reps')} x {s.get('elems')} elements alone {_ms(s.get('alone_s'))} ms. Slowdown = time "
           "beside the interferer / alone - 1."]
    channels = section.get("model_channels")
    if channels:
        out += ["", f"The model's NCCL ring on this GPU in an {channels['node']} node: {channels['channels']} channels of "
                f"{channels['sms']} SMs; while they run it slows compute by {_pct(channels['slowdown'])}."]
    out += ["", "| interferer | blocks | loop | measured | predicted | interferer GB/s | outlasted the window | model |",
            "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['interferer']} | {r['channels']} | {r['loop']} | {_pct(r['measured_slowdown'])} | "
                   f"{_pct(r['predicted_slowdown'])} | {_sig(r['interferer_GBps'])} | "
                   f"{r['outlasted']} | {r['model']} |")
    for skipped in result.get("skipped", []):
        out.append(f"\nNot run: {skipped['interferer']} ({skipped['why']}).")
    return out + [""]


def _harness_md(comp: dict[str, Any]) -> list[str]:
    rows = comp["harness"]
    if not rows:
        return []
    out = ["## The harness on CUDA", "",
           "| step | status | seconds | what it gave | iteration measured / predicted (ms) | error |",
           "|---|---|---|---|---|---|"]
    for h in rows:
        out.append(f"| {h['step']} | {h['status']} | {_fixed(h['elapsed_s'], 0)} | {h['summary']} | "
                   f"{_ms(h['measured'])} / {_ms(h['predicted'])} | {_pct(h['error'])} |")
    return out + [""]


def build_report(data: dict[str, Any], gpu: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """(report.md, comparison.csv, the comparisons) for a gpu_check.json's content."""
    data = check_format(data, "gpu_check.json")
    comp = comparisons(data, prediction_gpu(data, gpu))
    return render_report(data, comp), comparison_csv(comp), comp
