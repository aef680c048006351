"""One gradient bucket's synchronisation, per rank, in the detailed fidelity: codec and collective.

The wire bytes and the device time of every codec pass come from the cost layer the fast path
uses (``sim.costs.codecs``: ``wire_bytes``, ``encode_time_s``, ``decode_sum_time_s``,
``error_feedback_time_s``); this module only says where each happens on a rank's comm stream (the encode before the
collective runs on the compute stream instead when the caller passes ``encoded``):
- no codec: the strategy's collective (ring, hierarchical, ps) on the bucket's bytes.
- allreduce path (fp16, bf16, fp32 codecs): encode (and error feedback), the collective on
  the wire bytes S_c with the codec's per-element sum inside the reduce-scatter steps of its
  rings, then one decode of the result. With ps the sum cost is paid after the pull (the cost
  layer charges a worker (n-1)/n of a tensor's sum on every collective).
- allgather path (fp8, int8): encode, a ring allgather of every rank's S_c over all ranks
  (n-1 steps of S_c: each rank receives (n-1) S_c), then decode and sum of all n copies
  (its own too, as sim.costs.codecs and the real hooks do).
- reduce_scatter path: a ring reduce-scatter in the compute dtype (n-1 steps of S/n), encode
  of the reduced shard (and error feedback), a ring allgather of the encoded shards (n-1
  steps of S_c/n with a scale each), then decode of the whole tensor.
Whatever the strategy's collective, the allgather and reduce_scatter paths run over the flat
ring of all ranks in node-major order, as ``sim.costs.codecs`` costs them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import simpy

from sim.codecs import CODECS
from sim.costs.codecs import decode_sum_time_s, encode_time_s, error_feedback_time_s, wire_bytes
from sim.engine.detailed_collectives import Collectives
from sim.errors import ConfigError
from sim.scenario import Scenario

ALLREDUCE_SCHEDULES = ("ring", "hierarchical", "ps")
"""Collectives the detailed mode has per-rank schedules for."""

SpanHook = Callable[[str, float], None]
"""``hook(name, start_s)`` records a span ending now on the rank's comm lane."""


def uses_collective(scenario: Scenario) -> bool:
    """Whether the strategy's collective carries the gradients (no codec, or the allreduce path)."""
    return scenario.strategy.codec is None or scenario.strategy.resolved_codec_path() == "allreduce"


def detailed_collective(collective: str) -> str:
    """The per-rank schedule the detailed mode runs: ``auto`` is the ring (on alpha-beta links
    the libraries' choice; NCCL's trees and NVLS are costed by the fast path only)."""
    return "ring" if collective == "auto" else collective


def check_sync(scenario: Scenario) -> None:
    collective = detailed_collective(scenario.strategy.collective)
    if uses_collective(scenario) and collective not in ALLREDUCE_SCHEDULES:
        raise ConfigError("simulation.fidelity", "detailed",
                          f"fast for collective={collective} (the detailed mode has per-rank schedules for "
                          + ", ".join(ALLREDUCE_SCHEDULES) + ")", related=("strategy.collective", "strategy.codec", "strategy.codec_path"))
    if collective == "ps" and scenario.strategy.ps_placement != "sharded" and uses_collective(scenario):
        raise ConfigError("simulation.fidelity", "detailed",
                          f"fast for strategy.ps_placement={scenario.strategy.ps_placement} (the detailed mode "
                          "shards every bucket over the servers)", related=("strategy.ps_placement", "strategy.collective"))


class GradientSync:
    """The bucket reductions of one scenario over a group of ranks (all ranks for data parallelism)."""

    def __init__(self, env: simpy.Environment, scenario: Scenario, coll: Collectives):
        strategy = scenario.strategy
        self.env = env
        self.coll = coll
        self.collective = detailed_collective(strategy.collective)
        self.servers = strategy.ps_servers
        self.gpu = scenario.cluster.gpu
        self.src_bytes = strategy.grad_bytes_per_param
        self.codec = CODECS[strategy.codec] if strategy.codec is not None else None
        self.path = strategy.resolved_codec_path()
        self.error_feedback = strategy.error_feedback
        reduce_ns = strategy.codec_reduce_ns_per_elem
        self.reduce_ns = (self.codec.reduce_ns_per_elem if reduce_ns is None and self.codec else reduce_ns or 0.0)
        self.encode_ns = strategy.codec_encode_ns_per_elem
        self.decode_ns = strategy.codec_decode_ns_per_elem
        self.codec_busy_s: dict[int, float] = defaultdict(float)
        """Encode, decode, local sums and error feedback per rank (the ring sums included)."""

    def collective_bytes(self, n_bytes: float) -> float:
        """Bytes the strategy's collective carries for a bucket of ``n_bytes`` (allreduce path)."""
        if self.codec is None:
            return n_bytes
        return wire_bytes(n_bytes / self.src_bytes, self.codec)

    def _work(self, rank: int, seconds: float, name: str, hook: SpanHook | None):
        if seconds <= 0:
            return
        start = self.env.now
        self.codec_busy_s[rank] += seconds
        yield self.env.timeout(seconds)
        if hook is not None:
            hook(name, start)

    def _allreduce(self, members: Sequence[int], pos: int, n_bytes: float, tag: Any, sum_s: float,
                   concurrent: Sequence[Sequence[int]] | None = None):
        coll, rank = self.coll, members[pos]
        if self.collective == "ring":
            yield from coll.ring_allreduce(members, pos, n_bytes, tag, sum_s, concurrent)
        elif self.collective == "hierarchical":
            yield from coll.hierarchical_allreduce(members, pos, n_bytes, tag, sum_s, concurrent)
        else:
            yield from coll.ps_push_pull(rank, n_bytes, tag, self.servers)
            m = len(members)
            yield from self._work(rank, (m - 1) / m * sum_s, "sum", None)

    def bucket(self, members: Sequence[int], pos: int, n_bytes: float, tag: Any, hook: SpanHook | None = None,
               encoded: bool = False, concurrent: Sequence[Sequence[int]] | None = None):
        """``members[pos]``'s part of reducing one bucket of ``n_bytes`` (compute dtype) over ``members``.
        ``encoded``: the caller's compute stream already did the work before the collective
        (``sim.engine.plan.bucket_encode_s``); it is counted as codec time, not run again.
        ``concurrent``: the groups (``members`` among them) whose flat rings run at the same moment
        and share links (the periodic engine's max-min set; the event engine sees it by itself)."""
        if len(members) == 1 or n_bytes <= 0:
            return
        rank, m, codec = members[pos], len(members), self.codec
        if codec is None:
            yield from self._allreduce(members, pos, n_bytes, tag, 0.0, concurrent)
            return
        coll, gpu, src = self.coll, self.gpu, self.src_bytes
        elems = n_bytes / src
        feedback_s = error_feedback_time_s(elems, src, codec, gpu) if self.error_feedback else 0.0
        if self.path == "reduce_scatter":
            yield from coll.ring_reduce_scatter(members, pos, n_bytes, tag, concurrent=concurrent)
            yield from self._work(rank, encode_time_s(elems / m, src, codec, gpu, self.encode_ns) + feedback_s,
                                  "encode", hook)
            yield from coll.ring_allgather(members, pos, wire_bytes(elems, codec, tensors=m) / m, tag, concurrent)
            yield from self._work(rank, decode_sum_time_s(elems, 1, src, codec, gpu, 0.0, self.decode_ns), "decode", hook)
            return
        encode_s = encode_time_s(elems, src, codec, gpu, self.encode_ns) + feedback_s
        if encoded:
            self.codec_busy_s[rank] += encode_s
        else:
            yield from self._work(rank, encode_s, "encode", hook)
        if self.path == "allgather":
            yield from coll.ring_allgather(members, pos, wire_bytes(elems, codec), tag, concurrent)
            decode_s = decode_sum_time_s(elems, m, src, codec, gpu, self.reduce_ns, self.decode_ns)
            yield from self._work(rank, decode_s, "decode + sum", hook)
            return
        before = coll.sum_busy_s[rank]
        yield from self._allreduce(members, pos, wire_bytes(elems, codec), tag, elems * self.reduce_ns * 1e-9, concurrent)
        self.codec_busy_s[rank] += coll.sum_busy_s[rank] - before
        yield from self._work(rank, decode_sum_time_s(elems, 1, src, codec, gpu, 0.0, self.decode_ns), "decode", hook)
