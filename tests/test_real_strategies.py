"""Strategies on 2 gloo ranks: compression hooks, parameter servers, pipeline."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from real.launch import launch  # noqa: E402
from real.models import build_model, loss_fn  # noqa: E402
from real.strategies.common import rank_batches  # noqa: E402
from real.strategies.hooks import FORMATS, error_bound  # noqa: E402

pytestmark = pytest.mark.torch


def _fp32_rank_grads(model_name: str, batch: int, world: int, seed: int = 0) -> list[torch.Tensor]:
    grads = []
    for r in range(world):
        model = build_model(model_name, seed)
        x, y = rank_batches(model_name, batch, seed, r, count=1)[0]
        loss_fn(model_name)(model(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    return grads


@pytest.fixture(scope="module")
def hooked():
    job = {"kind": "grad_check", "model": "small_cnn", "batch_size": 4, "formats": list(FORMATS),
           "bucket_mib": 0.25, "backend": "gloo"}
    return launch(job, 2, timeout_s=60, deadline_s=180)


def test_fp32_ddp_is_the_mean_of_the_rank_gradients(hooked):
    mean = sum(_fp32_rank_grads("small_cnn", 4, 2)) / 2
    got = torch.tensor(hooked["none"]["grad"])
    assert torch.allclose(got, mean, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_compressed_gradients_within_the_format_bound(hooked, fmt):
    per_rank = _fp32_rank_grads("small_cnn", 4, 2)
    mean = sum(per_rank) / 2
    got = torch.tensor(hooked[fmt]["grad"])
    err = (got - mean).abs()
    bound = error_bound(fmt, per_rank)
    assert bool((err <= bound).all()), f"{fmt}: worst excess {(err - bound).max().item():.3g}"
    assert hooked[fmt]["calls"] >= 1  # the hook ran (DDP buckets its first iteration in one piece here)
    # the format really lost information (the test can fail if the hook sent fp32)
    assert (got - mean).abs().max() > 0
    expected_path = "allreduce" if FORMATS[fmt].path == "allreduce" else "allgather_uint8"
    assert hooked[fmt]["path"].startswith(expected_path)


def _spec(strategy: str, gpus: int = 2, **real) -> dict:
    from real.seed_mlp import SEED_SPEC

    return {**SEED_SPEC, "workload": {"model": "mlp", "batch_size": 16, "optimizer": "momentum"},
            "cluster": {"gpus": gpus, "gpu": "cpu"}, "strategy": {"ps_servers": 2},
            "real": {"strategy": strategy, "baseline": False, "lr": 0.05, **real}}


def test_sync_ps_matches_data_parallel_numerically():
    """Two sharded servers, momentum SGD: the same losses as DDP (= one process on all samples)."""
    from real.measure import run_spec
    from real.seed_mlp import data_parallel_losses, reference_losses

    spec = _spec("ps_sync")
    _, _, raw = run_spec(spec, iterations=4, warmup=1, timeout_s=30)
    assert raw["ranks"][0]["comm_path"].endswith("2 server shard(s)")
    assert data_parallel_losses(raw) == pytest.approx(reference_losses(spec, 5), rel=1e-5)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_equals_the_unsplit_model(schedule):
    """2 stages, 4 micro-batches: the last stage's loss each step is the unsplit model's on the batch."""
    from real.measure import run_spec
    from real.seed_mlp import reference_losses

    spec = _spec("pipeline", microbatches=4, schedule=schedule)
    _, _, raw = run_spec(spec, iterations=3, warmup=1, timeout_s=30)
    last = raw["ranks"][-1]["losses"]
    unsplit = reference_losses({**spec, "cluster": {"gpus": 1, "gpu": "cpu"}, "real": {"lr": 0.05}}, 4)
    assert last == pytest.approx(unsplit, rel=1e-5)
    assert raw["pipeline_stages"] == 2 and raw["microbatches"] == 4


def test_async_ps_records_staleness_per_update():
    from real.measure import run_spec

    _, _, raw = run_spec(_spec("ps_async", gpus=3), iterations=4, warmup=1, timeout_s=30)
    staleness = raw["staleness"]
    assert len(staleness) == 2 * 5  # every push of both workers is one update
    assert all(0 <= s < len(staleness) for s in staleness)
    assert len(raw["ranks"]) == 2 and raw["workers"] == 2


def test_pipeline_child_ranges_cover_every_child_once():
    from real.strategies.pipeline import child_ranges, pipeline_scenario
    from sim.config import scenario_from_dict

    for model, stages in [("mlp", 2), ("mlp", 3), ("small_cnn", 4), ("small_transformer", 2)]:
        for rule in ("time", "flops", "params"):
            scenario = scenario_from_dict({"workload": {"model": model}, "cluster": {"gpus": stages, "gpu": "cpu"},
                                           "strategy": {"stage_balance": rule}})
            n = len(build_model(model))
            bounds = child_ranges(pipeline_scenario(scenario, stages, 1), n)
            assert len(bounds) == stages
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(lo < hi for lo, hi in bounds)
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
