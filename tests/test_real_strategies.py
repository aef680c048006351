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
    job = {"kind": "grad_check", "model": "small_transformer", "batch_size": 2, "formats": list(FORMATS),
           "bucket_mib": 0.5, "backend": "gloo"}
    return launch(job, 2, timeout_s=60, deadline_s=180)


def test_fp32_ddp_is_the_mean_of_the_rank_gradients(hooked):
    mean = sum(_fp32_rank_grads("small_transformer", 2, 2)) / 2
    got = torch.tensor(hooked["none"]["grad"])
    assert torch.allclose(got, mean, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_compressed_gradients_within_the_format_bound(hooked, fmt):
    per_rank = _fp32_rank_grads("small_transformer", 2, 2)
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
