"""nccl-tests output read into rows and fitted into catalog links (``scalebench calibrate
--from-nccl-tests``).

Reads what nccl-tests' ``*_perf`` binaries print (src/common.cu: a '#' header naming every rank's
host and device, a column header ``size count type [redop] [root] time algbw busbw #wrong``
twice, out-of-place then in-place, units row, one line per size) and the CSV or JSON a user made
of it (columns or keys size, time [us], algbw, busbw; optionally op, nranks). Every row keeps
the file and line it came from; a line that cannot be read is a one-line error naming both.

Fitting: per (op, ranks, hosts), t(S) = alpha + S / B_alg from the out-of-place times
(sim.fit.two_regime_fit: bandwidth from sizes >= 256 KiB, latency from sizes <= 16 KiB), mapped
onto the simulator's ring form of that op at that rank count (sim.fit.link_parameters); one node:
the intra-node link; several: the inter-node link (the ring's one edge per node), with the
intra-node link the catalog's, measured kind. The entries are kind ``measured``: their figures
hold the library's own costs, and every backend costs collectives on them as the algorithm's
counted steps (sim/costs/backends/alpha_beta.py).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

OPS_BY_BINARY = {
    "all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "sendrecv": "sendrecv",
}
_DEVICE_LINE = re.compile(r"#\s*Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\s+(\d+)")


@dataclass(frozen=True)
class NcclTestsRow:
    op: str
    size_bytes: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float
    ranks: int
    hosts: int
    where: str
    """file:line the row came from."""


def _op_from(text: str) -> str | None:
    for key in sorted(OPS_BY_BINARY, key=len, reverse=True):  # all_reduce before reduce
        if key in text.lower() or key.replace("_", "") in text.lower().replace("_", ""):
            return OPS_BY_BINARY[key]
    return None


def _number(where: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(where, text, f"a number ({what})") from None
    if not value == value or value < 0 or value == float("inf"):
        raise ConfigError(where, text, f"a finite non-negative number ({what})")
    return value


def parse_text(path: Path, text: str, op: str | None = None, ranks: int | None = None) -> list[NcclTestsRow]:
    """The table nccl-tests prints."""
    devices: dict[int, str] = {}
    header: list[str] | None = None
    op = op or _op_from(path.name)
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{path}:{lineno}"
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            m = _DEVICE_LINE.search(stripped)
            if m:
                devices[int(m.group(1))] = m.group(2)
            tokens = stripped.lstrip("#").split()
            if "size" in tokens and "time" in tokens and "busbw" in tokens:
                header = tokens
            if op is None and "_perf" in stripped:
                op = _op_from(stripped)
            continue
        if header is None:
            raise ConfigError(where, stripped[:60], "nccl-tests output: a '# size count type ... time algbw busbw' "
                                                    "header before the rows")
        tokens = stripped.split()
        if len(tokens) < header.index("busbw") + 1:
            raise ConfigError(where, stripped[:60], f"a row of {len(header)} columns ({' '.join(header)})")
        if op is None:
            raise ConfigError(where, path.name, "a file named after its binary (all_reduce_perf ...) or --op")
        n = ranks or len(devices)
        if n < 2:
            raise ConfigError(where, n, "the ranks of the run (from its '# Rank N ... on HOST device D' lines or --ranks): at least 2")
        i_time, i_algbw, i_busbw = header.index("time"), header.index("algbw"), header.index("busbw")
        size = int(_number(where, tokens[header.index("size")], "size in bytes"))
        rows.append(NcclTestsRow(op, size, _number(where, tokens[i_time], "time in us") * 1e-6,
                                 _number(where, tokens[i_algbw], "algbw"), _number(where, tokens[i_busbw], "busbw"),
                                 n, len(set(devices.values())) or 1, where))
    if not rows:
        raise ConfigError(str(path), "no rows", "nccl-tests output with at least one size row")
    return rows


def _from_records(path: Path, records: list[dict[str, Any]], op: str | None, ranks: int | None,
                  hosts: int | None, lines: list[int]) -> list[NcclTestsRow]:
    rows = []
    for record, lineno in zip(records, lines, strict=True):
        where = f"{path}:{lineno}"
        keys = {k.strip().lower().lstrip("#"): v for k, v in record.items() if k is not None}
        missing = [k for k in ("size", "time") if k not in keys]
        if missing:
            raise ConfigError(where, sorted(keys), "columns or keys size and time (us), optionally op, nranks, "
                                                   "algbw, busbw")
        row_op = keys.get("op") or op or _op_from(path.name)
        if row_op not in OPS_BY_BINARY.values():
            raise ConfigError(where, row_op, "an op (allreduce, allgather, ...): a column, --op or the file name")
        n = int(_number(where, str(keys.get("nranks") or ranks or 0), "nranks"))
        if n < 2:
            raise ConfigError(where, n, "nranks (a column or --ranks) of at least 2")
        size = int(_number(where, str(keys["size"]), "size"))
        t = _number(where, str(keys["time"]), "time in us") * 1e-6
        if t <= 0:
            raise ConfigError(where, keys["time"], "a positive time in us")
        algbw = float(keys.get("algbw") or size / t / 1e9)
        rows.append(NcclTestsRow(str(row_op), size, t, algbw, float(keys.get("busbw") or 0.0), n,
                                 int(keys.get("nhosts") or hosts or 1), where))
    if not rows:
        raise ConfigError(str(path), "no rows", "at least one size row")
    return rows


def read_nccl_tests(path: str | Path, *, op: str | None = None, ranks: int | None = None,
                    hosts: int | None = None) -> list[NcclTestsRow]:
    """Rows of one nccl-tests output file: its text table, or CSV or JSON made of it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError("--from-nccl-tests", str(path), f"a readable nccl-tests output file ({err})") from None
    if op is not None and op not in OPS_BY_BINARY.values():
        raise ConfigError("--op", op, OPS_BY_BINARY.values())
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}:{err.lineno}", "malformed JSON", f"valid JSON ({err.msg})") from None
        records = data.get("results", data.get("rows")) if isinstance(data, dict) else data
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ConfigError(str(path), type(records).__name__, "a JSON list of rows, or {results: [...]}")
        return _from_records(path, records, op, ranks, hosts, list(range(1, len(records) + 1)))
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        records = list(reader)
        return _from_records(path, records, op, ranks, hosts, list(range(2, len(records) + 2)))
    return parse_text(path, text, op, ranks)


def link_entries(rows: list[NcclTestsRow], name: str, intra_base: str | None = None) -> dict[str, dict[str, Any]]:
    """Catalog link entries fitted to the rows (see the module docstring)."""
    from sim.fit import AlphaBeta, link_parameters, two_regime_fit

    groups: dict[tuple[str, int, int], list[NcclTestsRow]] = {}
    for r in rows:
        groups.setdefault((r.op, r.ranks, r.hosts), []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for (op, n, hosts), group in sorted(groups.items()):
        fit = two_regime_fit([r.size_bytes for r in group], [r.time_s for r in group])
        if fit is None:
            raise ConfigError(group[0].where, f"{len(group)} sizes", f"{op} rows from <= 16 KiB and at least two "
                                                                    ">= 256 KiB, to fit a latency and a bandwidth")
        a_s, b_Bps = link_parameters(AlphaBeta(alpha_s=fit[0], bandwidth_Bps=fit[1], rms_relative_error=0.0,
                                               points=len(group)), op, n)
        which = "intra" if hosts == 1 else "inter"
        key = f"{name}_{which}" + ("" if op == "allreduce" else f"_{op}")
        out[key] = {"kind": "measured", "bandwidth_GBps": round(b_Bps / 1e9, 6), "latency_us": 0,
                    "software_latency_us": round(a_s * 1e6, 4), "efficiency": 1.0,
                    "source": f"scalebench calibrate --from-nccl-tests: {op} on {n} ranks over {hosts} host(s), "
                              f"{len(group)} sizes from {group[0].where.rsplit(':', 1)[0]}; t = alpha + S/B_alg "
                              f"(two-regime fit) mapped onto the ring form at n={n}"}
        if hosts > 1 and intra_base:
            out.setdefault(f"{name}_intra", {"base": intra_base, "kind": "measured",
                                             "source": f"the catalog's {intra_base}, as a measured link beside "
                                                       f"{key} (the fit holds the whole ring)"})
    return out
