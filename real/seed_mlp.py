"""The seeds' experiment: y = exp(x) with the 1-16-32-1 MLP, data parallel vs one process.

Synchronous data parallelism with N ranks of batch b each, averaging gradients, is the same
computation as one process on the N x b samples (mean losses, equal shards), so the loss
curves must overlap up to float rounding. ``reference_losses`` is that one process;
``python -m real.seed_mlp`` runs both and draws ``results/seed_mlp/loss.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SEED_SPEC: dict[str, Any] = {
    "name": "seed-mlp",
    "workload": {"model": "mlp", "batch_size": 32, "optimizer": "sgd"},
    "cluster": {"gpus": 2, "gpu": "cpu"},
    "strategy": {"collective": "ring"},
    "real": {"lr": 0.1, "baseline": False},
}


def reference_losses(spec: dict[str, Any], steps: int) -> list[float]:
    """One process, the same seed, every rank's batch of each step concatenated."""
    import torch

    from real.config import real_scenario
    from real.models import loss_fn
    from real.strategies.common import base_model, make_optimizer, rank_batches

    scenario, options = real_scenario(spec)
    world, w = scenario.cluster.world_size, scenario.workload
    model = base_model(scenario)
    opt = make_optimizer(model.parameters(), w.optimizer, options.lr)
    loss = loss_fn(w.name)
    shards = [rank_batches(w.name, w.batch_size, scenario.seed, r) for r in range(world)]
    losses = []
    for i in range(steps):
        x = torch.cat([s[i % len(s)][0] for s in shards])
        y = torch.cat([s[i % len(s)][1] for s in shards])
        opt.zero_grad(set_to_none=True)
        value = loss(model(x), y)
        value.backward()
        opt.step()
        losses.append(float(value.detach()))
    return losses


def data_parallel_losses(raw: dict[str, Any]) -> list[float]:
    """Mean over ranks of each step's loss (= the loss on all ranks' samples)."""
    per_rank = [r["losses"] for r in raw["ranks"]]
    return [sum(col) / len(col) for col in zip(*per_rank, strict=True)]


def run_seed_experiment(out_dir: str | Path = "results/seed_mlp", steps: int = 200, world: int = 2,
                        timeout_s: float = 60) -> dict[str, Any]:
    from real.measure import run_spec

    spec = {**SEED_SPEC, "cluster": {"gpus": world, "gpu": "cpu"}}
    _, _, raw = run_spec(spec, iterations=steps, warmup=0, timeout_s=timeout_s)
    dp = data_parallel_losses(raw)
    single = reference_losses(spec, steps)
    max_rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(dp, single, strict=True))
    out = Path(out_dir)
    _plot(out / "loss.png", dp, single, world, max_rel)
    from real.results import write_rows

    write_rows(out / "loss.csv", [{"step": i, "loss_data_parallel": a, "loss_single_process": b}
                                  for i, (a, b) in enumerate(zip(dp, single, strict=True))])
    return {"steps": steps, "world": world, "max_relative_difference": max_rel,
            "final_loss": dp[-1], "plot": str(out / "loss.png")}


def _plot(path: Path, dp: list[float], single: list[float], world: int, max_rel: float) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.fileio import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(single, label="single process (all samples)", linewidth=3, alpha=0.5)
    ax.plot(dp, label=f"data parallel, {world} ranks (gloo)", linestyle="--")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("MSE loss (log scale)")
    ax.set_title("y = exp(x), MLP 1-16-32-1, same seed: the curves overlap")
    ax.legend(title=f"largest relative difference {max_rel:.1e}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--out", default="results/seed_mlp")
    args = parser.parse_args()
    print(run_seed_experiment(args.out, args.steps, args.nproc))


if __name__ == "__main__":
    main()
