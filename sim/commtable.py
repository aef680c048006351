"""The table nccl-tests prints, shared by measured (``scalebench real --comm``) and predicted
(``scalebench collective``) collectives, so the two diff line by line.

Columns (nccl-tests doc/PERFORMANCE.md): size in bytes, count in elements, type, time in us,
algbw = size / time and busbw = algbw x the operation's factor in GB/s; then where the row came
from (the algorithm and protocol a prediction ran, '#wrong' of a measurement).
"""

from __future__ import annotations

from typing import Any

ELEMENT_BYTES = {"float": 4, "half": 2, "bfloat16": 2, "double": 8, "int8": 1}


def comm_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'op':>15} {'size':>12} {'count':>12} {'type':>8} {'time':>11} {'algbw':>9} {'busbw':>9}  {'algo/#wrong':<16}",
             f"{'':>15} {'(B)':>12} {'(elements)':>12} {'':>8} {'(us)':>11} {'(GB/s)':>9} {'(GB/s)':>9}  {'':<16}"]
    for r in rows:
        tail = (f"{r.get('algorithm', '')}/{r.get('protocol', '')}".rstrip("/") if "algorithm" in r
                else str(r.get("wrong", "")))
        if "time_s" not in r:
            lines.append(f"{r['collective']:>15} {r['size_bytes']:>12}  unsupported: {r.get('error', '')}")
            continue
        dtype = r.get("type", "float")
        count = r["size_bytes"] // ELEMENT_BYTES.get(dtype, 4)
        lines.append(f"{r['collective']:>15} {r['size_bytes']:>12} {count:>12} {dtype:>8} {r['time_s'] * 1e6:>11.2f} "
                     f"{r['algbw_GBps']:>9.3f} {r['busbw_GBps']:>9.3f}  {tail:<16}")
    return "\n".join(lines) + "\n"
