"""Gradient compression codecs: the wire formats, as data. A new codec is one entry in ``CODECS``.

A codec turns a gradient of ``elems`` elements (held in the compute precision) into
``elems x bytes_per_elem + scale_bytes`` bytes on the wire. What it costs and how it is
reduced lives in ``sim/costs/codecs.py``; this file only says what each format is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Codec:
    name: str
    bytes_per_elem: float
    """Bytes of one element on the wire."""
    scale_bytes: int = 0
    """Per-tensor metadata sent with each encoded tensor (an fp32 scale: 4 bytes)."""
    summable: bool
    """Whether collectives can sum the wire format in place (NCCL sums fp16/bf16; no backend
    we know of sums fp8, and gloo rejects it: DESIGN.md 'Observed on our machines')."""
    reduce_ns_per_elem: float = 0.0
    """Extra time to add one element of this format into an accumulator, beyond the memory pass
    (0 on a GPU, where the sum hides under the memory traffic; on a CPU backend fp16 sums are
    2-3x slower per byte than fp32 (DESIGN.md) and calibration sets this)."""
    source: str = ""


CODECS: dict[str, Codec] = {
    "fp32": Codec(name="fp32", bytes_per_elem=4, summable=True, source="IEEE 754 binary32"),
    "fp16": Codec(name="fp16", bytes_per_elem=2, summable=True,
                  source="IEEE 754 binary16; torch DDP fp16_compress_hook allreduces it (works on gloo)"),
    "bf16": Codec(name="bf16", bytes_per_elem=2, summable=True,
                  source="bfloat16; torch DDP bf16_compress_hook (NCCL only, DESIGN.md)"),
    "fp8_e4m3": Codec(name="fp8_e4m3", bytes_per_elem=1, scale_bytes=4, summable=False,
                      source="OCP 8-bit floating point spec (E4M3) with a per-tensor fp32 scale; "
                             "all_gather of a uint8 view works on gloo (DESIGN.md)"),
    "fp8_e5m2": Codec(name="fp8_e5m2", bytes_per_elem=1, scale_bytes=4, summable=False,
                      source="OCP 8-bit floating point spec (E5M2) with a per-tensor fp32 scale"),
    "int8": Codec(name="int8", bytes_per_elem=1, scale_bytes=4, summable=False,
                  source="symmetric int8 with a per-tensor fp32 scale (max-abs / 127)"),
}

CODEC_PATHS = ("allreduce", "allgather", "reduce_scatter")
"""allreduce: sum the wire format inside the collective (summable codecs only);
allgather: gather every rank's encoded tensor, decode and sum locally ((n-1) S_c per rank);
reduce_scatter: reduce-scatter in the compute precision, allgather the encoded reduced shards."""


def default_path(codec: Codec) -> str:
    """What the real harness does: allreduce what the backend can sum, allgather the rest."""
    return "allreduce" if codec.summable else "allgather"
