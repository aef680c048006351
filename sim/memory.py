"""Memory per rank: parameters, gradients, optimizer state, activations, codec buffers, stash.

Accounting as in ZeRO (Rajbhandari et al. 2020, section 3.1): parameters and gradients in the
compute precision; the optimizer keeps fp32 state per parameter (momentum: 1 copy; Adam: 2) and,
with 16-bit training, an fp32 master copy (Micikevicius et al. 2018) - 16 bytes per parameter for
mixed-precision Adam. Activations kept for backward: every layer's output for the micro-batch,
split over the tensor-parallel group (Megatron with sequence parallelism; without it some
activations are replicated, so this is a lower bound). A pipeline stage keeps the activations of
the micro-batches in flight (sim.costs.pipeline.stash_micro_batches).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.codecs import CODECS
from sim.costs.pipeline import stash_micro_batches
from sim.errors import ConfigError
from sim.scenario import Scenario
from sim.strategy import DTYPE_BYTES
from sim.units import human_bytes

OPTIMIZER_STATE_BYTES = {"sgd": 0, "momentum": 4, "adam": 8}
"""fp32 state per parameter: momentum's velocity; Adam's two moments (Kingma & Ba 2015)."""
MASTER_WEIGHTS_BYTES = 4
"""fp32 master copy kept by 16-bit training (Micikevicius et al. 2018)."""


@dataclass(frozen=True)
class MemoryBreakdown:
    stage: int
    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    """One micro-batch's stored activations."""
    stash_bytes: float
    """The other micro-batches a pipeline stage holds."""
    codec_bytes: float
    """Encoded bucket, gather buffer (allgather path) and error-feedback residual."""

    @property
    def total_bytes(self) -> float:
        return (self.params_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes
                + self.stash_bytes + self.codec_bytes)

    def parts(self) -> dict[str, float]:
        return {"params": self.params_bytes, "grads": self.grads_bytes, "optimizer": self.optimizer_bytes,
                "activations": self.activations_bytes, "pipeline stash": self.stash_bytes,
                "codec buffers": self.codec_bytes}


def memory_per_rank(scenario: Scenario, stage_bounds: list[tuple[int, int]] | None = None) -> list[MemoryBreakdown]:
    """One breakdown per pipeline stage (the ranks of a stage hold the same). ``stage_bounds``:
    the [start, end) layers of each stage when the caller has them already (the planner, which
    costs many layouts); None: cut as the pipeline engine cuts (sim.engine.pipeline_plan)."""
    workload, strategy, cluster = scenario.workload, scenario.strategy, scenario.cluster
    tp, pp, m = strategy.tp, strategy.pp, strategy.micro_batches
    dtype = DTYPE_BYTES[strategy.precision]
    micro = workload.batch_size // m
    if stage_bounds is not None:
        bounds = list(stage_bounds)
    elif pp > 1:
        from sim.engine.pipeline_plan import build_pipeline_plan

        bounds = [st.layers for st in build_pipeline_plan(scenario).stages]
    else:
        bounds = [(0, len(workload.layers))]
    dp = strategy.dp_degree(cluster.world_size)
    out = []
    for s, (lo, hi) in enumerate(bounds):
        layers = workload.layers[lo:hi]
        params = sum(layer.param_count for layer in layers) / tp
        state = OPTIMIZER_STATE_BYTES[workload.optimizer] + (MASTER_WEIGHTS_BYTES if dtype < 4 else 0)
        if strategy.collective == "ps":
            state = 0  # parameter servers apply the update and keep its state
        acts = micro * sum(layer.activation_elems for layer in layers) * dtype / tp
        stash = (stash_micro_batches(strategy.schedule, pp, m, s) - 1) * acts if pp > 1 else 0.0
        out.append(MemoryBreakdown(s, params * dtype, params * dtype, params * state, acts, stash,
                                   _codec_bytes(scenario, params, dtype, dp)))
    return out


def _codec_bytes(scenario: Scenario, params: float, dtype: int, dp: int) -> float:
    strategy = scenario.strategy
    if strategy.codec is None or dp == 1:
        return 0.0
    codec = CODECS[strategy.codec]
    bucket_elems = min(params, strategy.bucket_bytes / dtype)
    encoded = bucket_elems * codec.bytes_per_elem + codec.scale_bytes
    gather = (dp - 1) * encoded if strategy.resolved_codec_path() == "allgather" else 0.0
    residual = params * dtype if strategy.error_feedback else 0.0
    return encoded + gather + residual


def check_memory(scenario: Scenario) -> MemoryBreakdown:
    """The fullest rank's breakdown; a ConfigError naming what overflows, and by how much."""
    worst = max(memory_per_rank(scenario), key=lambda b: b.total_bytes)
    capacity = scenario.cluster.gpu.memory_bytes
    if worst.total_bytes > capacity:
        parts = " + ".join(f"{name} {human_bytes(v)}" for name, v in worst.parts().items() if v)
        where = f" (pipeline stage {worst.stage})" if scenario.strategy.pp > 1 else ""
        raise ConfigError(
            "memory per rank" + where, f"{human_bytes(worst.total_bytes)} = {parts}",
            f"at most the {human_bytes(capacity)} of a {scenario.cluster.gpu.name}: over by "
            f"{human_bytes(worst.total_bytes - capacity)} (more tp/pp, micro-batches, a smaller batch, or simulation.check_memory: false)",
            related=("workload", "cluster", "strategy", "catalog"),  # all of them decide it
        )
    return worst
