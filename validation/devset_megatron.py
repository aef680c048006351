"""Megatron-LM's weak scaling on Selene (Narayanan et al. 2021, Table 1) against the model.

``llm_megatron_2021.csv`` (validation/devset/README.md, 'Large-model training') gives, per GPT
model from 1.7B to 1T parameters, the layout (tensor x pipeline x data parallel), the GPUs, the
global batch and the achieved teraFLOP/s per GPU with the paper's FLOP count, equation (3):
F = 96 B s l h^2 (1 + s / 6h + V / 16 l h) per iteration (s 2048, V 51,200). The model predicts each
row's iteration T from the row's own configuration and reports F / (T x GPUs) beside the measured
figure and beside the README's naive floor (6 x parameters x tokens, x 4/3 with recomputation, at
50 % of the 312 TFLOP/s peak, no communication).

Each row's scenario, from the table and Megatron-LM's documented behaviour (nothing per row):
- the model: a GPT of the row's layers, hidden size and heads (sim.transformer's gpt2 family: 4h
  GeLU MLP, learned positions, head tied to the embedding), sequence 2048, vocabulary 51,200 (the
  paper's section 5.1 and the README of Megatron-LM at aed2f75e, April 2021);
- the cluster: DGX A100 80 GB nodes (8 GPUs, NVLink 3 / NVSwitch, 8 x 200 Gb/s HDR NICs for the
  application, rail-aligned: the catalog's a100 node), one switch (Selene's fat tree is full
  bisection);
- the strategy: fp16 mixed precision, full activation recomputation (equation 3 counts its extra
  forward), eager attention (2021 predates FlashAttention), the interleaved 1F1B schedule for the
  pipelined rows (section 5.1), no ZeRO and no sequence parallelism (neither existed in it);
  micro-batches of one sequence: the paper does not give them for Table 1, Megatron-LM's own GPT-3
  175B script of the same release does (examples/pretrain_gpt3_175B.sh, --micro-batch-size 1), and
  every row's micro-batch count B / dp is then a multiple of its pipeline size, as the interleaved
  schedule requires;
- chunks per pipeline rank: not stated; assumed one transformer layer per virtual stage
  (--num-layers-per-virtual-pipeline-stage 1), the only interleaving every pipelined row's layers
  per stage allow (the 529.6B model's 105 layers on 35 stages are 3 per stage: 1 or 3 per chunk;
  the 1T model's 128 on 64 stages are 2: 1 or 2 per chunk);
- gradients: Megatron-LM 2021's LocalDDP, one coalesced fp16 allreduce of every gradient after the
  pipeline's flush, not overlapped with backward (megatron/training.py train_step: the
  'backward-params-all-reduce' after forward_backward_func; megatron/model/distributed.py
  allreduce_gradients): ``strategy.framework: megatron_lm_2021``.

The GPU's efficiency (the fraction of the 312 TFLOP/s its GEMMs reach: 0.5 in the catalog, an
assumed starting point) is calibrated on one run outside the table, the one Megatron-LM's README of
the same release reports: GPT-3 175B (96 layers, h 12,288, 96 heads) on 1024 A100s, tensor 8 x
pipeline 16 x data 8, global batch 1536, micro-batch 1, no interleaving (its script sets none),
'around 32 seconds' per iteration, '138 teraFLOPs per GPU'. ``calibrated_gpu`` solves for the
efficiency at which the model gives that run's iteration (equation 3 at 138 TFLOP/s: 31.9 s); the
table's ten runs are then predicted with it. The catalog's uncalibrated A100 is reported beside it
(a group of its own, not gated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sim.catalog import GPU, Catalog, builtin_catalog
from sim.errors import ConfigError
from validation.devset_rows import Prediction

FILE = "llm_megatron_2021.csv"
SEQ_LEN = 2048
VOCAB = 51200
"""Section 5.1 and Megatron-LM's README (aed2f75e): 'vocabulary size of 51,200 and a sequence length of 2048'."""
PEAK_TFLOPS = 312.0
"""A100's 16-bit dense peak, the paper's % of peak denominator."""
MICRO_BATCH = 1
"""examples/pretrain_gpt3_175B.sh at aed2f75e: --micro-batch-size 1 (the paper does not state Table 1's)."""
LAYERS_PER_VIRTUAL_STAGE = 1
"""Assumed (module docstring): the one interleaving every pipelined row of the table admits."""
FLOOR_EFFICIENCY = 0.5
"""The devset README's naive floor: 6 x parameters x tokens (x 4/3 with recomputation) at 50 % of peak."""
CALIBRATED_GPU = "a100_megatron_2021"


@dataclass(frozen=True)
class MegatronRun:
    """One run: a GPT and its layout (the table's or the README's)."""

    model: str
    layers: int
    hidden: int
    heads: int
    global_batch: int
    gpus: int
    tp: int
    pp: int
    dp: int
    params_b: float
    tflops: float
    """Measured teraFLOP/s per GPU (equation 3)."""
    interleaved: bool = True

    @property
    def vpp(self) -> int:
        if self.pp == 1 or not self.interleaved:
            return 1
        return self.layers // (self.pp * LAYERS_PER_VIRTUAL_STAGE)

    def eq3_flops(self) -> float:
        """Narayanan et al. 2021 equation (3): FLOPs per iteration with full recomputation."""
        b, s, n_layers, h, v = self.global_batch, SEQ_LEN, self.layers, self.hidden, VOCAB
        return 96 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (16 * n_layers * h))

    def measured_iteration_s(self) -> float:
        return self.eq3_flops() / (self.tflops * 1e12 * self.gpus)

    def floor_tflops(self) -> float:
        """The README's naive floor as teraFLOP/s per GPU (equation 3's FLOPs over its time)."""
        tokens = self.global_batch * SEQ_LEN
        seconds = 6 * self.params_b * 1e9 * tokens * 4 / 3 / (FLOOR_EFFICIENCY * PEAK_TFLOPS * 1e12 * self.gpus)
        return self.eq3_flops() / (seconds * self.gpus) / 1e12


README_RUN = MegatronRun(model="GPT-3 175B (Megatron-LM README)", layers=96, hidden=12288, heads=96, global_batch=1536,
                         gpus=1024, tp=8, pp=16, dp=8, params_b=175.0, tflops=138.0, interleaved=False)
"""Megatron-LM README.md at aed2f75e (April 2021), 'GPT-3 Example': 'With full global batch size of 1536
on 1024 A100 GPUs, each iteration takes around 32 seconds resulting in 138 teraFLOPs per GPU which is
44% of the theoretical peak FLOPs'; examples/pretrain_gpt3_175B.sh: tensor 8, pipeline 16,
micro-batch 1, --checkpoint-activations, --fp16, no virtual pipeline."""


def _int(row: dict[str, str], key: str, path: str) -> int:
    try:
        return int(row[key])
    except (KeyError, ValueError):
        raise ConfigError(f"{path} {key}", row.get(key), "an integer") from None


def read_runs(rows: list[dict[str, str]], path: str = FILE) -> list[MegatronRun]:
    """The table's runs, one per model (its teraFLOP/s row; the % of peak rows are the same runs)."""
    out = []
    for r in rows:
        if not r.get("metric", "").startswith("achieved teraFLOP/s"):
            continue
        try:
            params, tflops = float(r["params_b"]), float(r["value"])
        except (KeyError, ValueError):
            raise ConfigError(f"{path} value", r.get("value"), "a number of teraFLOP/s per GPU") from None
        run = MegatronRun(model=r["model"], layers=_int(r, "layers", path), hidden=_int(r, "hidden", path),
                          heads=_int(r, "heads", path), global_batch=_int(r, "global_batch_seqs", path),
                          gpus=_int(r, "gpus", path), tp=_int(r, "tp", path), pp=_int(r, "pp", path),
                          dp=_int(r, "dp", path), params_b=params, tflops=tflops)
        if run.tp * run.pp * run.dp != run.gpus:
            raise ConfigError(f"{path} gpus", run.gpus, f"tp x pp x dp = {run.tp * run.pp * run.dp} ({run.model})")
        out.append(run)
    return out


def run_spec(run: MegatronRun, gpu: str) -> dict[str, Any]:
    """The run as a scenario (module docstring); ``scalebench simulate`` takes it as written."""
    m = run.global_batch // run.dp // MICRO_BATCH
    strategy: dict[str, Any] = {"framework": "megatron_lm_2021", "kind": "hybrid" if run.tp * run.pp > 1 else
                                "data_parallel", "tp": run.tp, "pp": run.pp, "micro_batches": m, "schedule": "1f1b",
                                "precision": "fp16", "recompute": "full", "attention": "eager"}
    if run.vpp > 1:
        strategy["vpp"] = run.vpp
    return {
        "name": f"megatron-2021-{run.model}",
        "workload": {"model": "decoder", "batch_size": run.global_batch // run.dp,
                     "architecture": {"family": "gpt2", "layers": run.layers, "hidden": run.hidden, "heads": run.heads,
                                      "seq_len": SEQ_LEN, "vocab": VOCAB}},
        "cluster": {"gpus": run.gpus, "gpu": gpu},
        "strategy": strategy,
    }


def predicted_iteration_s(run: MegatronRun, catalog: Catalog, gpu: str) -> float:
    """The run's iteration through the planner's evaluator (sim.planner.evaluate: simulate()'s figures
    bit for bit, tests/test_planner.py; its replayed pipeline flush keeps the 1T model's 65,536
    stage operations to a second)."""
    from sim.frameworks import FRAMEWORKS
    from sim.planner import plan_request_from_dict
    from sim.planner.evaluate import Evaluator
    from sim.planner.space import Layout, Sync

    spec = run_spec(run, gpu)
    s = spec["strategy"]
    preset = FRAMEWORKS["megatron_lm_2021"]
    request = plan_request_from_dict({"workload": {k: v for k, v in spec["workload"].items() if k != "batch_size"},
                                      "cluster": spec["cluster"],
                                      "strategy": {"precision": s["precision"], "attention": s["attention"],
                                                   "overlap": preset["overlap"]},
                                      "plan": {"global_batch": run.global_batch, "backends": ["nccl"],
                                               "bucket_mib": [preset["bucket_mib"]], "max_tp": run.tp}}, catalog)
    layout = Layout(run.gpus, run.tp, run.pp, run.dp, run.global_batch // run.dp, s["micro_batches"], "1f1b",
                    vpp=run.vpp, recompute="full")
    outcome = Evaluator(request).evaluate(layout, Sync.of("nccl", "auto", None, None, preset["bucket_mib"]))
    return outcome.iteration_time_s


def calibrated_gpu(catalog: Catalog | None = None, base: str = "a100", tolerance: float = 1e-4) -> GPU:
    """The A100 with the efficiency at which the model gives the README run's iteration (module
    docstring), found by bisection (the iteration falls as the efficiency rises)."""
    catalog = catalog or builtin_catalog()
    target = README_RUN.measured_iteration_s()

    def at(efficiency: float) -> float:
        gpu = replace(catalog.gpus[base], name=CALIBRATED_GPU, efficiency=efficiency,
                      source=f"{catalog.gpus[base].source}; efficiency calibrated on Megatron-LM's README GPT-3 175B run")
        return predicted_iteration_s(README_RUN, with_gpu(catalog, gpu), CALIBRATED_GPU) - target

    low, high = 0.2, 1.0
    if at(high) > 0 or at(low) < 0:
        raise ConfigError("validation.devset_megatron", base, "a GPU whose efficiency in (0.2, 1] can match the README run")
    while high - low > tolerance:
        mid = (low + high) / 2
        low, high = (mid, high) if at(mid) > 0 else (low, mid)
    efficiency = round((low + high) / 2, int(-math.log10(tolerance)))
    return replace(catalog.gpus[base], name=CALIBRATED_GPU, efficiency=efficiency,
                   source=f"{catalog.gpus[base].source}; efficiency {efficiency} calibrated on Megatron-LM's README "
                          "GPT-3 175B run (138 TFLOP/s per GPU on 1024 A100s, aed2f75e)")


def with_gpu(catalog: Catalog, gpu: GPU) -> Catalog:
    return replace(catalog, gpus={**catalog.gpus, gpu.name: gpu})


GROUP = "megatron2021 GPT 1.7B-1T"
UNCALIBRATED = "megatron2021 GPT (catalog A100, uncalibrated)"


def megatron_predictions(data_dir: Path, read) -> list[Prediction]:
    """Per run: measured teraFLOP/s per GPU, the model's with the calibrated A100 (gated) and with
    the catalog's (not gated), beside the README's floor."""
    runs = read_runs(read(Path(data_dir) / FILE), FILE)
    catalog = builtin_catalog()
    gpu = calibrated_gpu(catalog)
    calibrated = with_gpu(catalog, gpu)
    out = []
    for run in runs:
        for group, cat, name, gated in ((GROUP, calibrated, gpu.name, True), (UNCALIBRATED, catalog, "a100", False)):
            t = predicted_iteration_s(run, cat, name)
            predicted = run.eq3_flops() / (t * run.gpus) / 1e12
            case = f"{run.model} tp {run.tp} pp {run.pp} dp {run.dp} ({run.gpus} GPUs)"
            out.append(Prediction(group, case, run.tflops, predicted, run.floor_tflops(), "TFLOP/s", gated=gated,
                                  gpus=run.gpus))
    return out
