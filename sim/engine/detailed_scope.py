"""What the detailed mode simulates per flow, as one registry: a strategy field it does not cover
is refused, naming ``fidelity: fast``, the moment it differs from its default.

Every field of ``sim.strategy.Strategy`` is either listed in ``COVERED`` (the detailed mode runs
it: its buckets, codecs, collectives, layouts and schedules come from the same plans as the fast
path's) or not. A field not listed - one the detailed mode has no per-rank mechanism for, or a
field added to the strategy later - refuses the run when it is set, so a new strategy field is a
detailed-mode refusal until someone adds it here with its mechanism, never a silent answer that
leaves it out. ``VALUES`` narrows a covered field to the values the detailed mode runs.
"""

from __future__ import annotations

from dataclasses import fields

from sim.errors import ConfigError
from sim.strategy import Strategy

COVERED = frozenset({
    # labels and the library: what they set is in the fields below
    "kind", "framework", "backend", "protocol", "nccl_socket_nthreads", "nccl_nsocks_perthread", "nccl_version",
    "mpi_library",
    # gradient synchronisation (sim.engine.detailed_sync; collective and PS settings: check_sync)
    "collective", "ps_servers", "ps_mode", "ps_placement", "bucket_bytes", "first_bucket_bytes",
    "overlap", "double_buffering", "iteration_overhead_s", "comm_slows_compute",
    # terms both engines take from the same plan or apply to either's iteration
    "multi_gpu_overhead_s", "inter_node_overhead_s", "data_loader", "data_workers",
    "attention",  # each layer's compute, which both modes share
    "precision", "codec", "codec_path", "error_feedback", "codec_reduce_ns_per_elem", "codec_encode_ns_per_elem",
    "codec_decode_ns_per_elem",
    # layouts (sim.engine.detailed_pipeline)
    "dp", "tp", "pp", "micro_batches", "schedule", "stage_balance", "pipeline_overhead_s",
})
"""Strategy fields the detailed mode simulates (nccl_version: its rings run the release's tables,
as the fast path's; mpi_library: the detailed mode runs the ring whatever MPI would choose; the
calibrated overheads: in the plan's iteration_overhead_s, which its compute streams run; the input
pipeline: sim.simulate bounds either engine's iteration by it). Not
here, and refused when set: fusion_bytes and cycle_time_s (Horovod's fusion buffer copies and
cycle ticks: the detailed comm streams reduce a bucket as it fills), negotiation (Horovod's
coordination), mpi_gpu_buffers (MPI's host staging), ps_layout other than dedicated, ps_rpc and
root_collective (its servers are dedicated hosts answering plain messages),
concurrent_collectives, the asynchronous PS's staleness settings, and any field added to the
strategy after this list."""

VALUES = {
    "schedule": ("gpipe", "1f1b"),
    "ps_mode": ("sync",),
}
"""Covered fields the detailed mode runs only some values of."""


def check_strategy_scope(strategy: Strategy) -> None:
    """Refuse a strategy field the detailed mode does not simulate (one line, naming fidelity fast)."""
    kind = type(strategy)
    defaults = kind()
    for f in fields(kind):
        value = getattr(strategy, f.name)
        if f.name in COVERED:
            allowed = VALUES.get(f.name)
            if allowed is not None and value not in allowed:
                raise ConfigError("simulation.fidelity", "detailed",
                                  f"fast for strategy.{f.name}={value} (the detailed mode runs "
                                  f"{' and '.join(allowed)})", related=(f"strategy.{f.name}",))
            continue
        if value != getattr(defaults, f.name):
            raise ConfigError("simulation.fidelity", "detailed",
                              f"fast for strategy.{f.name}={value} (the detailed mode does not simulate it per flow; "
                              "sim/engine/detailed_scope.py lists what it does)", related=(f"strategy.{f.name}",))
