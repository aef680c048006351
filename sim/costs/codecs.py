"""What compressing a gradient costs: wire bytes, encode/decode passes, and the collective path.

Encode and decode are memory-bound passes over the gradient (DESIGN.md 'Compression'), costed
on the device's memory bandwidth: t = bytes read + bytes written / memory bandwidth, unless a
calibration measured them per element (strategy ``codec_encode_ns_per_elem`` /
``codec_decode_ns_per_elem``): on a CPU, torch's dtype casts are far slower than memory.
Where the work runs: the encode (and error feedback) precedes the collective and is done by
whoever hands the bucket over (``CompressedSync.encode_s``: DDP's backward thread, the compute
stream); decode and local sums follow it on the comm stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.catalog import GPU
from sim.cluster import Cluster
from sim.codecs import Codec
from sim.costs.comm import CommSpec, allreduce_cost, op_cost


def wire_bytes(elems: float, codec: Codec, tensors: int = 1) -> float:
    """S_c = elems x bytes_per_elem + tensors x scale_bytes."""
    return elems * codec.bytes_per_elem + tensors * codec.scale_bytes


def is_identity(codec: Codec, src_bytes: int) -> bool:
    """Sending the gradient in its own dtype needs no encode or decode pass."""
    return codec.bytes_per_elem == src_bytes and codec.scale_bytes == 0


def encode_time_s(elems: float, src_bytes: int, codec: Codec, gpu: GPU, ns_per_elem: float | None = None) -> float:
    """Read the gradient, write the wire format: t = elems (src + b_c) / memory bandwidth
    (plus a max-abs pass for a scaled format: + elems src / memory bandwidth).
    Calibrated (``ns_per_elem``, real/codec_bench.py: the harness' own encode timed on this
    machine, co-location included): t = elems x ns_per_elem. On CPUs torch's casts run far below
    the memory roofline (DESIGN.md 'Observed'; codec_bench measured 5-8 ns per element for fp8
    against about 0.5 ns for the roofline)."""
    if is_identity(codec, src_bytes):
        return 0.0
    if ns_per_elem is not None:
        return elems * ns_per_elem * 1e-9
    scale_pass = elems * src_bytes if codec.scale_bytes else 0.0
    return (elems * (src_bytes + codec.bytes_per_elem) + scale_pass) / gpu.memory_bandwidth_Bps


def decode_sum_time_s(elems: float, copies: float, src_bytes: int, codec: Codec, gpu: GPU,
                      reduce_ns_per_elem: float, decode_ns_per_elem: float | None = None) -> float:
    """Decode ``copies`` encoded tensors and add each into an accumulator in the compute dtype:
    t = copies x elems x (b_c + 2 src) / memory bandwidth + copies x elems x reduce cost.
    Calibrated (``decode_ns_per_elem``: the harness' decode and fp32 add, timed per element per
    copy, real/codec_bench.py): t = copies x elems x decode_ns_per_elem (the add is inside
    the measurement, so the reduce cost is not added again)."""
    if is_identity(codec, src_bytes):
        return copies * elems * reduce_ns_per_elem * 1e-9
    if decode_ns_per_elem is not None:
        return copies * elems * decode_ns_per_elem * 1e-9
    memory = copies * elems * (codec.bytes_per_elem + 2 * src_bytes)
    return memory / gpu.memory_bandwidth_Bps + copies * elems * reduce_ns_per_elem * 1e-9


def error_feedback_time_s(elems: float, src_bytes: int, codec: Codec, gpu: GPU) -> float:
    """Error feedback (Seide et al. 2014; Karimireddy et al. 2019): add the residual before
    encoding and keep (gradient - decoded) as the next residual: read gradient, residual and
    the encoded tensor, write the residual: t = elems (3 src + b_c) / memory bandwidth."""
    return elems * (3 * src_bytes + codec.bytes_per_elem) / gpu.memory_bandwidth_Bps


@dataclass(frozen=True)
class CompressedSync:
    bytes_by_link: dict[str, float]
    """What the collectives put on each link class (cluster totals)."""
    network_s: float
    codec_s: float
    """Encode, decode, local sums and error feedback (all codec work)."""
    encode_s: float = 0.0
    """The part of ``codec_s`` done before the collective starts, by whoever hands the bucket
    over (DDP runs a communication hook from its autograd hook: on the backward thread, i.e.
    the compute stream); the rest runs where the collective completes (the comm stream)."""

    @property
    def time_s(self) -> float:
        return self.network_s + self.codec_s

    @property
    def after_handoff_s(self) -> float:
        """Network and codec work after the encode: what the comm stream spends."""
        return self.time_s - self.encode_s


@dataclass(frozen=True)
class _PathArgs:
    cluster: Cluster
    spec: CommSpec
    gpu: GPU
    reduce_ns: float
    encode_ns: float | None
    decode_ns: float | None


Network = tuple[float, dict[str, float]]
"""(seconds, bytes by link class) of a path's collectives."""


def _sum(*costs) -> Network:
    return (sum(c.time_s for c in costs),
            {k: sum(c.bytes_by_link.get(k, 0.0) for c in costs) for k in ("intra", "inter")})


def _allreduce_path(elems, src_bytes, codec, a: _PathArgs) -> tuple[Network, float, float]:
    n = a.cluster.world_size
    steps = _sum(allreduce_cost(wire_bytes(elems, codec), a.cluster, a.spec))
    encode_s = encode_time_s(elems, src_bytes, codec, a.gpu, a.encode_ns)
    # each rank adds (n-1)/n of the tensor during the reduce-scatter half of a ring
    codec_s = (encode_s + decode_sum_time_s(elems, 1, src_bytes, codec, a.gpu, 0.0, a.decode_ns)
               + (n - 1) / n * elems * a.reduce_ns * 1e-9)
    return steps, codec_s, encode_s


def _allgather_path(elems, src_bytes, codec, a: _PathArgs) -> tuple[Network, float, float]:
    """Ring allgather of every rank's S_c: (n-1) steps of S_c, then decode and sum all n copies
    (its own too: every replica must sum the same quantised values to stay identical, and
    real/strategies/hooks.py does so)."""
    n = a.cluster.world_size
    steps = _sum(op_cost("allgather", n * wire_bytes(elems, codec), a.cluster, a.spec))
    encode_s = encode_time_s(elems, src_bytes, codec, a.gpu, a.encode_ns)
    codec_s = encode_s + decode_sum_time_s(elems, n, src_bytes, codec, a.gpu, a.reduce_ns, a.decode_ns)
    return steps, codec_s, encode_s


def _reduce_scatter_path(elems, src_bytes, codec, a: _PathArgs) -> tuple[Network, float, float]:
    """Reduce-scatter in the compute dtype ((n-1)/n S), allgather the encoded shards ((n-1)/n S_c);
    the encode follows the reduce-scatter, so nothing runs before the hand-off."""
    n = a.cluster.world_size
    steps = _sum(op_cost("reduce_scatter", elems * src_bytes, a.cluster, a.spec),
                 op_cost("allgather", wire_bytes(elems, codec, tensors=n), a.cluster, a.spec))
    codec_s = (encode_time_s(elems / n, src_bytes, codec, a.gpu, a.encode_ns)
               + decode_sum_time_s(elems, 1, src_bytes, codec, a.gpu, 0.0, a.decode_ns))
    return steps, codec_s, 0.0


PATHS: dict[str, Callable[..., tuple[Network, float, float]]] = {
    "allreduce": _allreduce_path,
    "allgather": _allgather_path,
    "reduce_scatter": _reduce_scatter_path,
}


def compressed_sync(elems: float, src_bytes: int, codec: Codec, path: str, cluster: Cluster, *,
                    gpu: GPU, spec: CommSpec | None = None,
                    reduce_ns_per_elem: float | None = None, error_feedback: bool = False,
                    encode_ns_per_elem: float | None = None, decode_ns_per_elem: float | None = None) -> CompressedSync:
    """Synchronise one bucket of ``elems`` gradient elements through ``codec`` along ``path``."""
    if cluster.world_size == 1 or elems == 0:
        return CompressedSync({"intra": 0.0, "inter": 0.0}, 0.0, 0.0)
    reduce_ns = codec.reduce_ns_per_elem if reduce_ns_per_elem is None else reduce_ns_per_elem
    if spec is None:
        from sim.costs.backends import default_backend

        spec = CommSpec(backend=default_backend(gpu))
    args = _PathArgs(cluster, spec, gpu, reduce_ns, encode_ns_per_elem, decode_ns_per_elem)
    (network_s, by_link), codec_s, encode_s = PATHS[path](elems, src_bytes, codec, args)
    if error_feedback:
        feedback_s = error_feedback_time_s(elems, src_bytes, codec, gpu)
        codec_s += feedback_s
        encode_s += feedback_s if path != "reduce_scatter" else 0.0  # it precedes the encode
    return CompressedSync(by_link, network_s, codec_s, encode_s)


def per_rank_wire_bytes_closed_form(elems: float, n: int, codec: Codec, path: str, src_bytes: int = 4) -> float:
    """Bytes each rank sends (oracle): allreduce 2(n-1)/n S_c; allgather (n-1) S_c;
    reduce_scatter (n-1)/n S + (n-1)/n (elems b_c + n scale) (n shards, each with its scale)."""
    s_c = wire_bytes(elems, codec)
    if path == "allreduce":
        return 2 * (n - 1) / n * s_c
    if path == "allgather":
        return (n - 1) * s_c
    return (n - 1) / n * elems * src_bytes + (n - 1) / n * wire_bytes(elems, codec, tensors=n)


def crossover_ranks(elems: float, cluster_of: Callable[[int], Cluster], gpu: GPU, *,
                    slow: tuple[Codec, str], fast: tuple[Codec, str], src_bytes: int = 4,
                    ranks: range = range(2, 4097)) -> int | None:
    """The smallest n in ``ranks`` at which ``slow`` (e.g. fp8 by allgather) takes longer than
    ``fast`` (e.g. fp16 by ring allreduce) for one tensor; None if it never does."""
    for n in ranks:
        cluster = cluster_of(n)
        a = compressed_sync(elems, src_bytes, slow[0], slow[1], cluster, gpu=gpu).time_s
        b = compressed_sync(elems, src_bytes, fast[0], fast[1], cluster, gpu=gpu).time_s
        if a > b:
            return n
    return None
