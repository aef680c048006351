"""What the harness' compression hooks cost per element on this CPU: a microbenchmark of its own.

The simulator's roofline (sim/costs/codecs.py) costs encode and decode as memory passes. On
this CPU torch's casts are far slower than that: a float8 -> fp32 cast runs at about 12 ns per
element on one core (about 40x the copy roofline), e4m3 much slower than e5m2, and the
allgather path decodes every rank's part. So we time the hooks' own functions
(real/strategies/hooks.py ``allreduce_encode``/``allreduce_decode``, ``allgather_encode``/
``allgather_decode``) on synthetic buckets of 2^17, 2^19 and 2^21 fp32 elements (not the
validation models' buckets), with k ranks co-located on the machine's cores, each running the
harness' torch threads (max(1, cores // k)) and timing at the same moment (barrier before each
repeat, slowest rank's mean), and write per world size k:
  encode_ns_per_elem = t_encode / E                     (the work before the collective)
  decode_ns_per_elem = t_decode / (copies x E)          (the work after it, per decoded copy)
with copies = k for the allgather formats (every rank's part is decoded and summed) and 1 for
the allreduce formats; each the median over sizes. The values carry their own co-location (k
ranks sharing the cores), so the simulator does not scale them again (sim/costs/colocation.py
scales only roofline terms); a world size that was not measured takes the nearest one's values
times the ratio of the processor-sharing factors. -> ``<calibration>/codec_ops.yaml``, read by
``codec_ops_for``.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import yaml

from real.bench_ranks import run_as_rank, run_ranks, timed
from real.calib_lookup import nearest_world_size
from sim.fileio import atomic_write_text

CODEC_OPS_FILE = "codec_ops.yaml"
HOOK_CODECS = {"fp16": "fp16", "bf16": "bf16", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2", "int8": "int8"}
"""sim codec name -> real/strategies/hooks.py FORMATS key (the same names today)."""
SIZES_ELEMS = (2**17, 2**19, 2**21)


def _hook_ops(buffer, fmt, world: int):
    """(encode, decode) callables doing exactly the hook's work before and after its collective."""
    from real.strategies import hooks

    if fmt.path == "allreduce":
        compressed = hooks.allreduce_encode(buffer, fmt, world)
        return (lambda: hooks.allreduce_encode(buffer, fmt, world)), (lambda: hooks.allreduce_decode(buffer, compressed))
    payload, gathered, n_q = hooks.allgather_encode(buffer, fmt, world)
    gathered.copy_(payload.repeat(world))  # every part a valid encoding, as after the all_gather
    return (lambda: hooks.allgather_encode(buffer, fmt, world)), \
        (lambda: hooks.allgather_decode(buffer, gathered, n_q, fmt, world))


def run_ops(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One rank's rows: (codec, elems, world, encode_s, decode_s), each the mean over repeats of
    the slowest rank (real/bench_ranks.py ``timed``)."""
    import torch
    import torch.distributed as dist

    from real.strategies.hooks import FORMATS

    world = dist.get_world_size()
    gen = torch.Generator().manual_seed(dist.get_rank())
    rows = []
    for elems in job["sizes_elems"]:
        buffer = torch.randn(elems, generator=gen) * 1e-3
        for codec in job["codecs"]:
            fmt = FORMATS[HOOK_CODECS[codec]]
            encode, decode = _hook_ops(buffer, fmt, world)
            rows.append({"codec": codec, "path": fmt.path, "elems": elems, "world": world,
                         "encode_s": timed(encode, job["iterations"], job["warmup"]),
                         "decode_s": timed(decode, job["iterations"], job["warmup"])})
    return rows


def op_costs_ns(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per codec: encode ns per element and decode ns per element per decoded copy (the module
    docstring's formulas), medians over sizes."""
    out: dict[str, dict[str, float]] = {}
    for codec in sorted({r["codec"] for r in rows}):
        mine = [r for r in rows if r["codec"] == codec]
        copies = [int(r["world"]) if r["path"] == "allgather" else 1 for r in mine]
        out[codec] = {
            "encode_ns_per_elem": statistics.median(r["encode_s"] / r["elems"] * 1e9 for r in mine),
            "decode_ns_per_elem": statistics.median(r["decode_s"] / (c * r["elems"]) * 1e9
                                                    for r, c in zip(mine, copies, strict=True)),
        }
    return out


def measure_codec_ops(n: int, *, iterations: int = 10, warmup: int = 2, timeout_s: float = 300,
                      sizes_elems: tuple[int, ...] = SIZES_ELEMS,
                      codecs: tuple[str, ...] = tuple(HOOK_CODECS)) -> list[dict[str, Any]]:
    return run_ranks(n, {"kind": "codec_ops", "sizes_elems": list(sizes_elems), "codecs": list(codecs),
                         "iterations": iterations, "warmup": warmup}, module="real.codec_bench", timeout_s=timeout_s)


def calibrate_codec_ops(directory: str | Path, ranks: tuple[int, ...] = (2, 4), progress=print) -> dict[str, Any]:
    data: dict[str, Any] = {"form": __doc__, "world_sizes": {}}
    for n in ranks:
        progress(f"codec ops: the hooks' encode and decode on {n} co-located rank(s)")
        rows = measure_codec_ops(n)
        data["world_sizes"][n] = {"ns_per_elem": op_costs_ns(rows), "rows": rows}
    atomic_write_text(Path(directory) / CODEC_OPS_FILE, yaml.safe_dump(data, sort_keys=False))
    return data


def codec_ops_for(cal_dir: str | Path, codec: str, ranks: int, cores: int | None = None) -> dict[str, float] | None:
    """{encode_ns_per_elem, decode_ns_per_elem} of ``codec`` for ``ranks`` co-located ranks: the
    nearest measured world size k, scaled by processor sharing to ``ranks`` when ``cores`` is
    given: x colocation_factor(cores, ranks) / colocation_factor(cores, k) (sim/costs/colocation.py;
    measured on 2 cores: fp8 decode 9.9 ns at k=2, 20.5 at k=4, the factor's 2x). None: not calibrated."""
    from sim.costs.colocation import colocation_factor

    found = nearest_world_size(Path(cal_dir) / CODEC_OPS_FILE, ranks)
    if found is None:
        return None
    nearest, entry = found
    ops = (entry.get("ns_per_elem") or {}).get(codec)
    if ops is None or not cores:
        return ops
    scale = colocation_factor(cores, ranks) / colocation_factor(cores, nearest)
    return {key: value * scale for key, value in ops.items()}


if __name__ == "__main__":  # one rank (real/bench_ranks.py)
    run_as_rank(run_ops)
