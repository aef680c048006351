"""The extrapolate suite's series from the devset's second tranche (validation/extrapolate.py),
each built with the devset suite's own scenario builders (validation/devset_frameworks.py).

- ChainerMN 2017 (ChainerMN, MXNet, CNTK, TensorFlow): ResNet-50 at 32 images per GPU, 4 GPUs per
  node; runs on 1, 2, 4 GPUs (one node) and 8 (two nodes) calibrate, 16-128 are predicted. The
  plot is digitized to about +-3 % (the devset README), each run's uncertainty.
- Goyal et al. 2017: ResNet-50 on 8 P100 per server; the one-GPU step from the paper's 120 ms
  backward (the devset builder's) and one server's iteration from its epoch time (over 16 minutes
  at 8 GPUs, 32 images each: 16 min / (ImageNet's 1,281,167 / 256) iterations) calibrate; 352
  GPUs (44 servers) are predicted, against the paper's +12 % time per iteration. Efficiency is
  against one server, as the paper's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.runs_io import DEFAULT_SD_FRACTION
from validation.devset_frameworks import (  # H3's builders
    CHAINERMN_FRAMEWORKS,
    IMAGENET_TRAIN_IMAGES,
    _number,
    chainermn_scenario,
    chainermn_spec,
    devset_catalog,
    goyal_scenario,
    goyal_single_gpu_iteration_s,
    goyal_spec,
)
from validation.extrapolate_series import CHAINERMN_SD_FRACTION, Series

GOYAL_EPOCH_MINUTES_8_GPUS = 16.0
"""goyal_2017_caffe2_gloo.csv: 'time per epoch >16 minutes' at 8 GPUs (kn = 256)."""
GOYAL_ITERATION_INCREASE = 0.12
"""goyal_2017_caffe2_gloo.csv: 'increase in time per iteration 12 %' from 8 to 352 GPUs."""


def _read(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def chainermn_series(data_dir: Path) -> list[Series]:
    from sim.simulate import simulate

    rows = _read(data_dir / "chainermn_2017_frameworks.csv")
    catalog = devset_catalog()
    out = []
    for framework in CHAINERMN_FRAMEWORKS:
        mine = [r for r in rows if r["framework"] == framework and r["metric"] == "throughput"]
        if not mine:
            continue
        base = float(mine[0]["baseline_1gpu"])
        throughput = {int(r["gpus"]): _number(r["value"]) for r in mine}

        def spec_at(gpus: int, gpus_per_node: int, framework=framework) -> dict[str, Any]:
            return {k: v for k, v in chainermn_spec(framework, gpus).items() if k != "name"}

        def zero_shot(gpus: int, framework=framework, base=base) -> float:
            return simulate(chainermn_scenario(framework, gpus, base)).throughput_samples_per_s

        out.append(Series(f"chainermn2017 {framework}", spec_at, 32, 4, throughput,
                          {g: CHAINERMN_SD_FRACTION * v for g, v in throughput.items()},
                          {g: g * base for g in throughput}, zero_shot, catalog))
    return out


def goyal_series(data_dir: Path) -> list[Series]:
    from sim.simulate import simulate

    t1 = goyal_single_gpu_iteration_s()
    t8 = GOYAL_EPOCH_MINUTES_8_GPUS * 60 / (IMAGENET_TRAIN_IMAGES / (8 * 32))
    t352 = t8 * (1 + GOYAL_ITERATION_INCREASE)
    throughput = {1: 32 / t1, 8: 8 * 32 / t8, 352: 352 * 32 / t352}
    server = throughput[8]

    def spec_at(gpus: int, gpus_per_node: int) -> dict[str, Any]:
        spec = {k: v for k, v in goyal_spec(gpus).items() if k != "name"}
        spec["cluster"] = {**spec["cluster"], "gpus_per_node": min(8, gpus)}
        return spec

    def zero_shot(gpus: int) -> float:  # the devset row's t8 / t_n, scaled to one server's measured rate
        ratio = simulate(goyal_scenario(8)).iteration_time_s / simulate(goyal_scenario(gpus)).iteration_time_s
        return gpus / 8 * server * ratio

    return [Series("goyal2017 caffe2+gloo ResNet-50", spec_at, 32, 8, throughput,
                   {g: DEFAULT_SD_FRACTION * v for g, v in throughput.items()},
                   {g: g / 8 * server for g in throughput}, zero_shot)]
