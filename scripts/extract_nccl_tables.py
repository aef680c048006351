"""Extract NCCL's tuning tables from its source, per release, into tests/data/nccl/tables.json.

    python scripts/extract_nccl_tables.py --nccl PATH_TO_NVIDIA_NCCL_GIT [--check]

PATH is a clone (or bare git directory) of github.com/NVIDIA/nccl. For every release that
sim/costs/backends/nccl_tables.py models, the script reads each named C array and #define out of
the file at that release's tag, and writes, per item: the file, the line range it spans, the
SHA-256 of those source lines exactly as they are, and the numbers in them in source order. The
test (tests/test_nccl_tables_source.py) then compares the model's tables with these numbers, so a
table is pinned to NCCL's source text at a commit, not to a second hand-typed copy. ``--check``
re-reads the source and fails if the committed file differs (a wrong hash or number).

The numbers are taken from the source mechanically (C comments dropped, every numeric literal
in order); nothing here is typed by hand except which names to read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "nccl" / "tables.json"

TUNING_ERA = {
    "src/graph/tuning.cc": {
        "arrays": ["baseLat", "hwLat", "llMaxBws", "perChMaxRingLL128Bws", "perChMaxTreeLL128Bws",
                   "perChMaxTreeBws", "treeCorrectionFactor"],
        "lines": {"netOverheadIntel": r"VENDOR_INTEL\) return [\d.]+;",
                  "ringPlateau": r"minCompCap < 80 \? [\d.]+ : [\d.]+",
                  "ringLLFactor": r"if \(a == NCCL_ALGO_RING && p == NCCL_PROTO_LL\) \{ busBw = std::min\(llMaxBw, busBw \*[^;]*;"},
    },
    "src/graph/search.cc": {
        "arrays": ["speedArrayIntra", "speedArrayInter", "sm90SpeedArrayIntra", "sm90SpeedArrayInter"],
        "lines": {"dupMinBw": r"if \(graph->bwIntra < [\d.]+\) return ncclSuccess;",
                  "dupHopperException": r"if \(ccMin > \d+ && graph->bwIntra < [\d.]+ && graph->nChannels > \d+\) return ncclSuccess;"},
    },
    "src/graph/topo.h": {
        "defines": ["SM60_NVLINK_BW", "SM70_NVLINK_BW", "SM80_NVLINK_BW", "SM90_NVLINK_BW", "SM86_NVLINK_BW", "PCI_BW"],
    },
    "src/transport/net_socket.cc": {
        "defines": ["MAX_SOCKETS", "MAX_THREADS"],
        "lines": {"autoDefault": r"int autoNt=\d+, autoNs=\d+;",
                  "awsNt": r"0x1d0f\"\) == 0\) \{[^}]*?autoNt = \d+;[^}]*?autoNs = \d+;",
                  "gcpNt": r"0x1ae0\"\) == 0\) \{[^}]*?autoNt = \d+;[^}]*?autoNs = \d+;"},
    },
    "src/init.cc": {
        "lines": {"defaultBuffsize": r"#define DEFAULT_BUFFSIZE \(1 << \d+\)",
                  "p2pNetChunkSize": r"NCCL_PARAM\(P2pNetChunkSize, \"P2P_NET_CHUNKSIZE\", \(1 << \d+\)\)"},
    },
}
DEVICE_DEFINES = ["NCCL_STEPS", "MAXCHANNELS", "NCCL_SIMPLE_MAX_NTHREADS", "NCCL_LL_MAX_NTHREADS",
                  "NCCL_LL_LINES_PER_THREAD", "NCCL_LL128_MAX_NTHREADS"]

RELEASES: dict[str, dict[str, dict]] = {
    "v2.21.5-1": {**TUNING_ERA, "src/include/device.h": {"defines": DEVICE_DEFINES}},
    "v2.20.5-1": {**TUNING_ERA, "src/include/device.h": {"defines": DEVICE_DEFINES}},
    "v2.18.5-1": {**TUNING_ERA, "src/include/devcomm.h": {"defines": DEVICE_DEFINES},
                  "src/graph/paths.cc": {"lines": {"nchannelsPerNetPeer":
                                                   r"NCCL_PARAM\(NChannelsPerNetPeer, \"NCHANNELS_PER_NET_PEER\", -?\d+\)"}}},
    "v2.3.7-1": {
        "src/include/core.h": {"defines": ["MAXRINGS", "MAXTHREADS", "NCCL_LL_RING_THRESHOLD", "NCCL_THREAD_THRESHOLD",
                                           "NCCL_THREAD_THRESHOLD_PREVOLTA", "NCCL_LL_MAX_NTHREADS",
                                           "NCCL_LL_MIN_NTHREADS", "NCCL_LL_CHUNKS", "NUM_LINES_PER_THREAD"],
                               "lines": {"defaultBuffsize": r"#define DEFAULT_BUFFER_SIZE_BYTES \(1LL << \d+\)"}},
        "src/collectives/collectives.h": {"defines": ["ALLREDUCE_SUBSTEPS", "ALLREDUCE_BUFCHUNKS"]},
        "src/init.cu": {"lines": {"threadThresholdMultiNode": r"if \(multiNode\) \{\s*threshold \*= \d+;"}},
    },
    "v2.5.6-1": {"src/graph/tuning.cc": {"arrays": ["baseLat", "hwLat"]}},
    "v1.3.4-1": {"src/core.h": {"lines": {"defaultBuffsize": r"#define DEFAULT_BUFFER_SIZE_BYTES \(1UL << \d+\)"}}},
}
"""What to read per release (tag: {file: {arrays, defines, lines}}). v2.5.6's latencies stand in for
the ring era (sim/costs/backends/nccl_tables.py says why); v1.3.4 is NCCL 1's last release."""

NUMBER = re.compile(r"(?<![\w.])-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE]-?\d+)?(?![\w])")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", lambda m: " " * len(m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)


def _span(source: str, start: int, end: int) -> tuple[int, int, str]:
    """(first line, last line, those lines verbatim) of the character span [start, end)."""
    first = source.count("\n", 0, start) + 1
    last = source.count("\n", 0, end) + 1
    lines = source.splitlines(keepends=True)[first - 1:last]
    return first, last, "".join(lines)


def _numbers(text: str) -> list[float]:
    return [float(x) for x in NUMBER.findall(_strip_comments(text))]


def _item(path: str, source: str, start: int, end: int, numbers_text: str) -> dict:
    first, last, verbatim = _span(source, start, end)
    return {"file": path, "lines": [first, last], "sha256": hashlib.sha256(verbatim.encode()).hexdigest(),
            "numbers": _numbers(numbers_text)}


def extract(repo: Path, tag: str, spec: dict[str, dict]) -> dict:
    commit = _git(repo, "rev-parse", f"{tag}^{{commit}}").strip()
    items: dict[str, dict] = {}
    for path, what in spec.items():
        source = _git(repo, "show", f"{commit}:{path}")
        clean = _strip_comments(source)
        for name in what.get("arrays", []):
            m = re.search(r"\b" + re.escape(name) + r"\s*(?:\[[^=;]*\])*\s*=\s*\{", clean)
            if m is None:
                raise SystemExit(f"{tag} {path}: array {name} not found")
            depth, i = 0, m.end() - 1
            while True:
                depth += {"{": 1, "}": -1}.get(clean[i], 0)
                if depth == 0:
                    break
                i += 1
            items[name] = _item(path, source, m.start(), i + 1, clean[m.end() - 1:i + 1])
        for name in what.get("defines", []):
            m = re.search(r"^#define\s+" + re.escape(name) + r"\s+(.*)$", clean, re.M)
            if m is None:
                raise SystemExit(f"{tag} {path}: #define {name} not found")
            items[name] = _item(path, source, m.start(), m.end(), m.group(1))
        for name, pattern in what.get("lines", {}).items():
            m = re.search(pattern, clean, re.S)
            if m is None:
                raise SystemExit(f"{tag} {path}: {name} ({pattern}) not found")
            text = m.group(0).replace("0x1d0f", "").replace("0x1ae0", "")
            items[name] = _item(path, source, m.start(), m.end(), text)
    return {"commit": commit, "items": items}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nccl", required=True, type=Path, help="a clone or bare git directory of NVIDIA/nccl")
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    args = parser.parse_args(argv)
    data = {"source": "https://github.com/NVIDIA/nccl", "generator": "scripts/extract_nccl_tables.py",
            "releases": {tag: extract(args.nccl, tag, spec) for tag, spec in RELEASES.items()}}
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} differs from NCCL's source: run without --check to see the numbers", file=sys.stderr)
            return 1
        print(f"{OUT}: every item matches NCCL's source")
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({sum(len(r['items']) for r in data['releases'].values())} items)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
