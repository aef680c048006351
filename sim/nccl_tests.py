"""nccl-tests output read as pasted (``scalebench calibrate --from-nccl-tests``).

What nccl-tests' ``*_perf`` binaries print (NVIDIA/nccl-tests src/util.cu at 2.19.6: a '#' preamble
with ``nThread T nGpus G ...`` and one ``Rank r ... on HOST device d [bus] NAME`` line per rank, a
column header ``size count type redop root time algbw busbw #wrong`` twice (out-of-place, in-place),
a units row, one row per size, and ``# Avg bus bandwidth``), read the way users paste it:
- every line loses the prefixes launchers and documents put before it, as often as they repeat:
  Open MPI's ``--tag-output`` (``[1,0]<stdout>:``), srun's ``--label`` (``0: ``), Ray's
  ``(head, rank=0, pid=3808)``, a markdown quote (``> ``);
- anything that is not part of a table is skipped: command lines, shell traces, MPI and ssh
  warnings, ``NCCL INFO`` / ``NCCL WARN`` lines (also between the header and the rows), markdown
  fences and prose; a file may hold several tables (each header starts one);
- the old format (``error`` column, no ``root``; broadcast without ``redop``), the new one
  (``#wrong``, ``N/A`` when unchecked), per-iteration columns and a row cut short after its busbw
  are read by the header's own column names (the out-of-place time, algbw and busbw are used);
  rows of size 0 carry nothing and are dropped; a row with time 0.00 us cannot be timed and is
  dropped (a table with none left is an error).

Per table, nothing is guessed where the log says it, and the log is checked against itself:
- the op: from the header and the rows (the count column is per rank for allgather,
  reduce_scatter and alltoall: size / (count x type bytes) = ranks; ``redop none`` rules out
  reductions, ``root -1`` rooted ops; busbw/algbw = 2(n-1)/n only for allreduce, (n-1)/n for the
  per-rank ops, 1 for broadcast, reduce and sendrecv), and among what remains the binary the text
  names (``all_gather_perf``, ``# Collective test starting: all_reduce_perf_mpi``, the GCP script's
  ``-t all_gather``), nearest before the table first, then the file's name; ``--op`` overrides,
  and is refused where the table contradicts it;
- the ranks: busbw / algbw fixes them for allreduce and the per-rank ops (nccl-tests
  doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n or (n-1)/n), within the rounding of the printed
  figures; the ``Rank`` lines, ``--nranks`` and, without either, the launch command (``-np``,
  ``--ntasks``, the binary's ``-g`` and ``-t``) must agree with it, else a one-line error says
  which figures disagree (2 of 16 rank lines pasted is such a case);
- the hosts: the hostnames of a complete set of ``Rank`` lines, else ``--nhosts`` or the launch
  command (srun ``--nodes``, one process without a launcher = one host); the GPU: the devices'
  name (``--gpu`` overrides).

CSV and JSON: rows a user made of it (columns or keys size, time [us], optionally algbw, busbw,
op, nranks, nhosts, count, type, redop, root) and nccl-tests' own ``-J`` JSON (``devices``,
``results`` with ``out_of_place`` {time, alg_bw, bus_bw}). Every value is checked; a bad one is a
one-line error naming the file and line (or record) and what is allowed.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.errors import ConfigError

OPS_BY_BINARY = {
    "all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "sendrecv": "sendrecv",
}
OPS = tuple(OPS_BY_BINARY.values())
PER_RANK_COUNT_OPS = ("allgather", "reduce_scatter", "alltoall")
"""nccl-tests prints these ops' per-rank count: size = count x type bytes x ranks (all_gather.cu,
reduce_scatter.cu, alltoall.cu GetCollByteCount)."""
REDUCING_OPS = ("allreduce", "reduce_scatter", "reduce")
ROOTED_OPS = ("broadcast", "reduce")
TYPE_BYTES = {
    "int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8,
    "f8e4m3": 1, "f8e5m2": 1,
}
"""nccl-tests' type names (src/common.cu test_typenames) and their bytes."""

_PREFIXES = (
    re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?"),  # mpirun --tag-output
    re.compile(r"^\s*\d+:\s"),  # srun --label
    re.compile(r"^\([^()]*\)\s?"),  # Ray / SkyPilot: (head, rank=0, pid=3808)
    re.compile(r"^\s*>\s?"),  # a markdown quote
)
_RANK_LINE = re.compile(r"^Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_CONFIG_LINE = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)")
_BINARY = re.compile(r"\b(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv)_perf")
_SCRIPT_OP = re.compile(r"(?:^|\s)-t\s+(all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv)\b")
_END_OF_TABLE = ("Out of bounds", "Avg bus bandwidth", "Collective test concluded")
_COMMAND = re.compile(r"_perf(?:_mpi)?\s.*\s-[begfnt]\s")
"""A command line that runs a benchmark: the binary followed by its flags."""
_LAUNCHER = re.compile(r"\b(mpirun|mpiexec|orterun|srun|sbatch|torchrun|orted|kubectl)\b")


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


@dataclass(frozen=True)
class NcclTestsTable:
    """One table of one file, its op, ranks and hosts resolved (see the module docstring)."""

    path: str
    line: int
    op: str
    ranks: int
    hosts: int
    device: str | None
    """The GPUs' name as the Rank lines print it (``NVIDIA A100-SXM4-40GB``); None where absent."""
    rows: tuple[NcclTestsRow, ...]
    notes: tuple[str, ...] = ()
    """How the op, ranks and hosts were found, and what was dropped."""

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class _Raw:
    """A table as found, before its op, ranks and hosts are resolved."""

    path: str
    line: int
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    rank_lines: dict[int, tuple[str, str]] = field(default_factory=dict)
    procs_gpus: tuple[int, int] | None = None
    """(threads, GPUs per process) of the preamble's nThread line."""
    mentions: list[str] = field(default_factory=list)
    """Ops the text names before this table, nearest last."""
    file_mentions: list[str] = field(default_factory=list)
    """Ops the text names anywhere in the file, first first."""
    command: dict[str, int] = field(default_factory=dict)
    launcher: bool | None = None
    dropped: list[str] = field(default_factory=list)
    given_ranks: int | None = None
    given_hosts: int | None = None
    given_op: str | None = None


def _strip_prefixes(line: str) -> str:
    changed = True
    while changed:
        changed = False
        for pattern in _PREFIXES:
            new = pattern.sub("", line, count=1)
            if new != line:
                line, changed = new, True
    return line


def _number(where: str, text: Any, what: str, *, positive: bool = False) -> float:
    try:
        value = float(text) if not isinstance(text, (bool, list, dict)) and text is not None else float("nan")
    except (TypeError, ValueError):
        value = float("nan")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ConfigError(where, text, f"a finite {'positive' if positive else 'non-negative'} number ({what})")
    return value


def _integer(where: str, text: Any, what: str, minimum: int = 1) -> int:
    value = _number(where, text, what)
    if value != int(value) or value < minimum:
        raise ConfigError(where, text, f"an integer of at least {minimum} ({what})")
    return int(value)


def _ulp(text: str) -> float:
    """Half the last printed digit's place: nccl-tests prints bandwidths with 2 decimals, fewer when
    they do not fit in 6 characters (util.cu getFloatStr)."""
    text = str(text)
    if "e" in text.lower() or "." not in text:
        return 0.5
    return 0.5 * 10 ** -len(text.split(".")[1])


def _command_facts(line: str) -> dict[str, int]:
    facts: dict[str, int] = {}
    for key, pattern in (("procs", r"(?:\s-np|\s-n|\s--np|--ntasks)(?:=|\s+)(\d+)"),
                         ("nodes", r"(?:--nodes|\s-N)(?:=|\s+)(\d+)"),
                         ("per_node", r"(?:--ntasks-per-node(?:=|\s+)|-npernode\s+|ppr:)(\d+)"),
                         ("gpus", r"\s-g\s+(\d+)"), ("threads", r"\s-t\s+(\d+)\b")):
        m = re.search(pattern, " " + line)
        if m:
            facts[key] = int(m.group(1))
    return facts


def _parse_text(path: Path, text: str) -> list[_Raw]:
    tables: list[_Raw] = []
    rank_lines: dict[int, tuple[str, str]] = {}
    procs_gpus: tuple[int, int] | None = None
    mentions: list[str] = []
    command: dict[str, int] = {}
    launcher: bool | None = None
    current: _Raw | None = None
    logical = ""
    for lineno, raw_line in enumerate(text.splitlines(), 1):
        line = _strip_prefixes(raw_line)
        s = line.strip()
        if not s:
            continue
        where = f"{path}:{lineno}"
        body = s.lstrip("#").strip()
        tokens = body.split()
        # the text around the tables: what it says about the op and the launch
        logical = (logical + " " + s.rstrip("\\")) if logical else s.rstrip("\\")
        if not s.endswith("\\"):
            for m in _BINARY.finditer(logical):
                mentions.append(OPS_BY_BINARY[m.group(1)])
            script = _SCRIPT_OP.search(logical)
            if script:
                mentions.append(OPS_BY_BINARY[script.group(1)])
            if _COMMAND.search(logical) and not logical.lstrip().startswith("#"):
                command = _command_facts(logical)
                launcher = bool(_LAUNCHER.search(logical))
            logical = ""
        if {"size", "algbw", "busbw"} <= set(tokens) and ("time" in tokens or "cputime" in tokens):
            current = _Raw(str(path), lineno, tokens, rank_lines=dict(rank_lines), procs_gpus=procs_gpus,
                           mentions=list(mentions), command=dict(command), launcher=launcher)
            tables.append(current)
            continue
        rank = _RANK_LINE.match(body)
        if rank:
            if current is not None:  # a new run's preamble: the next header starts its table
                current, rank_lines = None, {}
            rank_lines[int(rank.group(1))] = (rank.group(2), rank.group(3))
            continue
        config = _CONFIG_LINE.search(body)
        if config:
            current, rank_lines = None, {}
            procs_gpus = (int(config.group(1)), int(config.group(2)))
            continue
        if s.startswith("#"):
            if current is not None and any(body.startswith(e) for e in _END_OF_TABLE):
                current = None
            continue
        if current is None or not tokens or not tokens[0].isdigit():
            continue  # prose, commands, warnings, NCCL INFO lines
        columns = current.columns
        needed = max(columns.index("busbw"), columns.index("algbw")) + 1
        if len(tokens) < needed:
            continue  # a line of digits that is not a row (an address, a count)
        current.rows.append(_row(where, columns, tokens))
    for table in tables:
        table.file_mentions = list(mentions)
    return tables


def _time_column(columns: list[str]) -> int:
    return columns.index("time") if "time" in columns else columns.index("cputime")


def _row(where: str, columns: list[str], tokens: list[str]) -> dict[str, Any]:
    """A data row by the header's column names (out-of-place: the first occurrence of each)."""
    def col(name: str) -> str | None:
        return tokens[columns.index(name)] if name in columns and columns.index(name) < len(tokens) else None

    size_text = col("size")
    if size_text is None or not size_text.isdigit():
        raise ConfigError(where, size_text, "a size in bytes (an integer) in the size column")
    count_text = col("count")
    return {
        "where": where,
        "size": int(size_text),
        "count": int(count_text) if count_text and count_text.isdigit() else None,
        "type": col("type"),
        "redop": col("redop"),
        "root": col("root"),
        "time_us": _number(where, tokens[_time_column(columns)], "time in us"),
        "algbw": _number(where, col("algbw"), "algbw in GB/s"),
        "busbw": _number(where, col("busbw"), "busbw in GB/s"),
        "algbw_ulp": _ulp(col("algbw") or ""),
        "busbw_ulp": _ulp(col("busbw") or ""),
    }


# -- resolving a table: op, ranks, hosts --------------------------------------------------

def _factor_interval(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """busbw / algbw as printed, the interval every row allows within its rounding."""
    lo, hi = 0.0, math.inf
    seen = False
    for r in rows:
        a, b = r.get("algbw"), r.get("busbw")
        if a is None or b is None:
            continue
        a_lo, a_hi = a - r.get("algbw_ulp", 0.0), a + r.get("algbw_ulp", 0.0)
        b_lo, b_hi = b - r.get("busbw_ulp", 0.0), b + r.get("busbw_ulp", 0.0)
        if a_lo <= 0 or b_lo <= 0:
            continue
        lo, hi = max(lo, b_lo / a_hi), min(hi, b_hi / a_lo)
        seen = True
    return (lo, hi) if seen else None


def ranks_from_factor(op: str, interval: tuple[float, float] | None) -> tuple[int, int] | None:
    """(fewest, most) ranks whose busbw factor (2(n-1)/n for allreduce, (n-1)/n for the per-rank
    ops) lies in ``interval``; None where the factor does not depend on n or nothing was printed.
    (n, 0) when no n fits: the figures contradict the op."""
    if interval is None or op not in ("allreduce", *PER_RANK_COUNT_OPS):
        return None
    lo, hi = interval
    scale = 2.0 if op == "allreduce" else 1.0  # f(n) = scale (n-1)/n  ->  n = scale / (scale - f)
    n_lo = 2 if lo <= 0 else max(2, math.ceil(scale / (scale - lo) - 1e-9) if lo < scale else 10**9)
    n_hi = 10**9 if hi >= scale else math.floor(scale / (scale - hi) + 1e-9)
    return (n_lo, n_hi) if n_lo <= n_hi else (n_lo, 0)


def _per_rank_ratio(rows: list[dict[str, Any]]) -> float | None:
    """size / (count x type bytes): 1 where count is the whole buffer, the rank count where per rank."""
    for r in rows:
        if r.get("count") and r.get("type") in TYPE_BYTES and r["size"] > 0:
            return r["size"] / (r["count"] * TYPE_BYTES[r["type"]])
    return None


def candidate_ops(raw: _Raw) -> list[str]:
    """The ops a table's header and rows allow (module docstring)."""
    cands = set(OPS)
    rows = raw.rows
    k = _per_rank_ratio(rows)
    if k is not None:
        cands &= set(PER_RANK_COUNT_OPS) if k >= 1.5 else {"allreduce", "broadcast", "reduce", "sendrecv"}
    redop = next((r["redop"] for r in rows if r.get("redop") is not None), None)
    root = next((r["root"] for r in rows if r.get("root") is not None), None)
    if "redop" in raw.columns and redop is not None:
        cands -= set(REDUCING_OPS) if redop == "none" else {"allgather", "alltoall", "broadcast"}
    elif raw.columns and "redop" not in raw.columns:
        cands -= set(REDUCING_OPS)
    if "root" in raw.columns and root is not None:
        cands &= set(ROOTED_OPS) if root != "-1" else cands - set(ROOTED_OPS)
    elif raw.columns and "root" not in raw.columns:
        cands -= set(ROOTED_OPS)
    interval = _factor_interval(rows)
    if interval is not None:
        lo, hi = interval
        if lo > 1.0:  # more than 1: only allreduce's 2(n-1)/n
            cands &= {"allreduce"}
        elif hi < 1.0:  # less than 1: allreduce is >= 1 at n >= 2, rooted ops and sendrecv = 1
            cands -= {"allreduce", "broadcast", "reduce", "sendrecv"}
    return [op for op in OPS if op in cands]


def _resolve_op(raw: _Raw, file_op: str | None) -> tuple[str, str]:
    cands = candidate_ops(raw)
    where = f"{raw.path}:{raw.line}"
    if raw.given_op is not None:
        if raw.given_op not in cands:
            raise ConfigError("--op", raw.given_op, f"an op the table at {where} can be: " + ", ".join(cands)
                              if cands else f"nothing: the table at {where} fits no op")
        return raw.given_op, "--op"
    if len(cands) == 1:
        return cands[0], "the table's columns and busbw/algbw"
    named = [op for op in [*reversed(raw.mentions), *raw.file_mentions, file_op] if op in cands]
    if named:
        return named[0], "the binary the text names"
    raise ConfigError(f"{where}: op", " or ".join(cands) or "none",
                      "--op, or a text naming its binary (all_reduce_perf ...): the table's columns allow "
                      + (", ".join(cands) if cands else "no op"))


def _resolve_ranks(raw: _Raw, op: str) -> tuple[int, str]:
    where = f"{raw.path}:{raw.line}"
    interval = _factor_interval(raw.rows)
    by_factor = ranks_from_factor(op, interval)
    lines = raw.rank_lines
    complete = bool(lines) and set(lines) == set(range(len(lines)))
    factor_text = (f"busbw/algbw = {interval[0]:.4g}..{interval[1]:.4g} on its rows says "
                   + (f"{by_factor[0]}" if by_factor and by_factor[0] == by_factor[1]
                      else f"{by_factor[0]} to {by_factor[1]}" if by_factor else "")) if interval else ""
    if by_factor is not None and by_factor[1] == 0:
        raise ConfigError(f"{where}: ranks", f"busbw/algbw {interval}", f"the busbw factor of {op} at some rank count")

    def agrees(n: int) -> bool:
        return by_factor is None or by_factor[0] <= n <= by_factor[1]

    if raw.given_ranks is not None:
        if not agrees(raw.given_ranks):
            raise ConfigError("--nranks", raw.given_ranks, f"a rank count the table at {where} agrees with: "
                              f"{factor_text}")
        return raw.given_ranks, "--nranks"
    if complete:
        n = len(lines)
        if not agrees(n):
            raise ConfigError(f"{where}: ranks", f"{n} (its '# Rank' lines)", f"{factor_text}: the paste lacks rank "
                              "lines, or they belong to another run; give --nranks")
        return n, "its '# Rank' lines" + (" and busbw/algbw" if by_factor else "")
    if by_factor is not None and by_factor[0] == by_factor[1]:
        n = by_factor[0]
        if lines and max(lines) + 1 > n:
            raise ConfigError(f"{where}: ranks", f"{n} ({factor_text})", f"at least {max(lines) + 1} (it has a "
                              f"'# Rank {max(lines)}' line); give --nranks")
        seen = f"; {len(lines)} of its '# Rank' lines were pasted" if lines else ""
        return n, f"busbw/algbw{seen}"
    launched = _launched_ranks(raw)
    if launched is not None and agrees(launched) and (not lines or launched > max(lines)):
        return launched, "the launch command"
    if lines and by_factor is None:
        raise ConfigError(f"{where}: ranks", f"{len(lines)} of the '# Rank' lines (up to rank {max(lines)})",
                          f"--nranks: {op}'s busbw/algbw does not depend on the rank count, so the rank lines "
                          "must all be there")
    raise ConfigError(f"{where}: ranks", "unknown", "--nranks (the log has no '# Rank' lines"
                      + (f", and {factor_text}" if factor_text else "") + ")")


def _launched_ranks(raw: _Raw) -> int | None:
    threads, gpus = raw.procs_gpus or (raw.command.get("threads", 1), raw.command.get("gpus", 1))
    cmd = raw.command
    if "procs" in cmd:
        procs = cmd["procs"]
    elif "nodes" in cmd and "per_node" in cmd:
        procs = cmd["nodes"] * cmd["per_node"]
    elif raw.launcher is False:
        procs = 1
    else:
        return None
    n = procs * threads * gpus
    return n if n >= 2 else None


def _resolve_hosts(raw: _Raw, ranks: int) -> tuple[int, str]:
    where = f"{raw.path}:{raw.line}"
    lines = raw.rank_lines
    if raw.given_hosts is not None:
        hosts, how = raw.given_hosts, "--nhosts"
    elif lines and set(lines) == set(range(ranks)):
        hosts, how = len({h for h, _ in lines.values()}), "its '# Rank' lines"
    elif raw.launcher is False and raw.command:
        hosts, how = 1, "one process without a launcher"
    elif "nodes" in raw.command:
        hosts, how = raw.command["nodes"], "the launch command"
    else:
        shown = f"{len(lines)} of {ranks} '# Rank' lines" if lines else f"no '# Rank' lines for its {ranks} ranks"
        raise ConfigError(f"{where}: hosts", f"unknown ({shown})", "--nhosts: the hosts the run spanned")
    if hosts < 1 or ranks % hosts:
        raise ConfigError("--nhosts" if how == "--nhosts" else f"{where}: hosts", hosts,
                          f"a divisor of its {ranks} ranks (ranks per host must be equal)")
    return hosts, how


def _resolve(raw: _Raw, file_op: str | None) -> NcclTestsTable:
    where = f"{raw.path}:{raw.line}"
    usable = [r for r in raw.rows if r["size"] > 0 and r["time_us"] > 0]
    dropped = [*raw.dropped]
    if len(usable) < len(raw.rows):
        zero_size = sum(1 for r in raw.rows if r["size"] == 0)
        zero_time = sum(1 for r in raw.rows if r["size"] > 0 and r["time_us"] <= 0)
        if zero_size:
            dropped.append(f"{zero_size} row(s) of size 0")
        if zero_time:
            dropped.append(f"{zero_time} row(s) timed at 0 us (below the printed resolution)")
    if not usable:
        raise ConfigError(where, f"{len(raw.rows)} rows" + (f" ({'; '.join(dropped)})" if dropped else ""),
                          "nccl-tests rows with a size and a time above 0 us")
    raw = _Raw(**{**raw.__dict__, "rows": usable})
    op, op_how = _resolve_op(raw, file_op)
    ranks, ranks_how = _resolve_ranks(raw, op)
    hosts, hosts_how = _resolve_hosts(raw, ranks)
    devices = {d for h, d in raw.rank_lines.values()}
    if len(devices) > 1:
        raise ConfigError(f"{where}: devices", sorted(devices), "one kind of GPU per run")
    rows = tuple(NcclTestsRow(op, int(r["size"]), r["time_us"] * 1e-6,
                              r["algbw"] if r["algbw"] is not None else r["size"] / (r["time_us"] * 1e3),
                              r["busbw"] if r["busbw"] is not None else 0.0, ranks, hosts, r["where"])
                 for r in usable)
    notes = (f"op {op} ({op_how})", f"{ranks} ranks ({ranks_how})", f"{hosts} host(s) ({hosts_how})", *dropped)
    return NcclTestsTable(str(raw.path), raw.line, op, ranks, hosts, next(iter(devices), None), rows, notes)


# -- CSV and JSON ------------------------------------------------------------------------

_RECORD_KEYS = ("size", "time", "algbw", "busbw", "op", "nranks", "nhosts", "count", "type", "redop", "root")


def _records_to_raw(path: Path, records: list[tuple[str, dict[str, Any]]], devices: dict[int, tuple[str, str]],
                    op: str | None, ranks: int | None, hosts: int | None) -> list[_Raw]:
    groups: dict[tuple[Any, Any, Any], _Raw] = {}
    for where, record in records:
        if not isinstance(record, dict):
            raise ConfigError(where, type(record).__name__, "a row: a mapping of " + ", ".join(_RECORD_KEYS))
        keys = {str(k).strip().lower().lstrip("#").strip(): v for k, v in record.items() if k is not None}
        if isinstance(keys.get("out_of_place"), dict):  # nccl-tests -J: {time, alg_bw, bus_bw}
            oop = keys["out_of_place"]
            keys = {**keys, "time": oop.get("time"), "algbw": oop.get("alg_bw"), "busbw": oop.get("bus_bw")}
        missing = [k for k in ("size", "time") if keys.get(k) in (None, "")]
        if missing:
            raise ConfigError(where, sorted(keys), "columns or keys size and time (us), optionally "
                              + ", ".join(_RECORD_KEYS[2:]))
        row_op = keys.get("op") or None
        if row_op is not None and row_op not in OPS:
            raise ConfigError(f"{where}: op", row_op, OPS)
        n = None if keys.get("nranks") in (None, "") else _integer(f"{where}: nranks", keys["nranks"], "ranks", 2)
        h = None if keys.get("nhosts") in (None, "") else _integer(f"{where}: nhosts", keys["nhosts"], "hosts", 1)
        size = _number(f"{where}: size", keys["size"], "size in bytes")
        if size != int(size):
            raise ConfigError(f"{where}: size", keys["size"], "a whole number of bytes")
        row = {
            "where": where, "size": int(size),
            "count": None if keys.get("count") in (None, "") else _integer(f"{where}: count", keys["count"], "count", 0),
            "type": keys.get("type"), "redop": keys.get("redop"),
            "root": None if keys.get("root") is None else str(keys["root"]).strip(),
            "time_us": _number(f"{where}: time", keys["time"], "time in us"),
            "algbw": None if keys.get("algbw") in (None, "") else _number(f"{where}: algbw", keys["algbw"], "algbw in GB/s"),
            "busbw": None if keys.get("busbw") in (None, "") else _number(f"{where}: busbw", keys["busbw"], "busbw in GB/s"),
            "algbw_ulp": _ulp(str(keys.get("algbw", ""))) if isinstance(keys.get("algbw"), str) else 0.005,
            "busbw_ulp": _ulp(str(keys.get("busbw", ""))) if isinstance(keys.get("busbw"), str) else 0.005,
        }
        key = (row_op, n, h)
        if key not in groups:
            columns = ["size", "count", "type"] + [c for c in ("redop", "root") if c in keys] + ["time", "algbw", "busbw"]
            line = where.rsplit(":", 1)[1]
            groups[key] = _Raw(str(path), int(line) if line.isdigit() else 1, columns, rank_lines=dict(devices),
                               given_op=row_op or op, given_ranks=n or ranks, given_hosts=h or hosts)
        groups[key].rows.append(row)
    return list(groups.values())


def _json_tables(path: Path, text: str, op: str | None, ranks: int | None, hosts: int | None) -> list[_Raw]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}", "malformed JSON", f"valid JSON ({err.msg})") from None
    records = data.get("results", data.get("rows")) if isinstance(data, dict) else data
    if not isinstance(records, list) or not records:
        raise ConfigError(str(path), type(records).__name__, "a JSON list of rows, or {results: [...]} (nccl-tests -J)")
    devices: dict[int, tuple[str, str]] = {}
    if isinstance(data, dict) and isinstance(data.get("devices"), list):
        for i, d in enumerate(data["devices"]):
            if isinstance(d, dict) and "hostname" in d:
                devices[int(d.get("rank", i))] = (str(d["hostname"]), str(d.get("device_info", "")))
    return _records_to_raw(path, [(f"{path}:row {i}", r) for i, r in enumerate(records, 1)], devices, op, ranks, hosts)


def _csv_tables(path: Path, text: str, op: str | None, ranks: int | None, hosts: int | None) -> list[_Raw]:
    reader = csv.DictReader(text.splitlines())
    records = [(f"{path}:{i}", r) for i, r in enumerate(reader, 2)]
    if not records:
        raise ConfigError(str(path), "no rows", "a CSV header (size, time, ...) and at least one row")
    return _records_to_raw(path, records, {}, op, ranks, hosts)


def read_nccl_tests_tables(path: str | Path, *, op: str | None = None, ranks: int | None = None,
                           hosts: int | None = None) -> list[NcclTestsTable]:
    """Every table of one nccl-tests output file (text as pasted, CSV or JSON), resolved."""
    path = Path(path)
    if op is not None and op not in OPS:
        raise ConfigError("--op", op, OPS)
    from sim.fileio import read_input_bytes

    # bounded: a named pipe nobody writes to or a device is one line, not a hang (issue 29)
    text = read_input_bytes("--from-nccl-tests", path, what="a readable nccl-tests output file").decode(
        "utf-8", errors="replace")
    file_op = next((OPS_BY_BINARY[k] for k in sorted(OPS_BY_BINARY, key=len, reverse=True)
                    if k in path.name.lower()), None)
    if path.suffix.lower() == ".json":
        raws = _json_tables(path, text, op, ranks, hosts)
    elif path.suffix.lower() == ".csv":
        raws = _csv_tables(path, text, op, ranks, hosts)
    else:
        raws = _parse_text(path, text)
        for raw in raws:
            raw.given_op, raw.given_ranks, raw.given_hosts = op, ranks, hosts
    if not raws:
        raise ConfigError(str(path), "no table", "nccl-tests output: a '# size count type ... time algbw busbw' "
                          "header and its rows")
    tables = [_resolve(raw, file_op) for raw in raws if raw.rows]
    if not tables:
        raise ConfigError(f"{path}:{raws[0].line}", "a header without rows", "nccl-tests rows under the header")
    return tables


def read_nccl_tests(path: str | Path, *, op: str | None = None, ranks: int | None = None,
                    hosts: int | None = None) -> list[NcclTestsRow]:
    """Every row of every table of one file (``read_nccl_tests_tables``)."""
    return [row for table in read_nccl_tests_tables(path, op=op, ranks=ranks, hosts=hosts) for row in table.rows]
