"""scalebench's flow network against SimGrid on the same fat trees (``scalebench validate --suite simgrid``).

SimGrid (Casanova et al., "Versatile, scalable, and accurate simulation of distributed applications
and platforms", JPDC 2014) is a flow-level simulator no one here wrote, validated against real
networks. Debian's python3-simgrid 3.32 runs under the system python3, so each case runs
validation/simgrid_runner.py there as a subprocess (``simgrid_python()`` finds that interpreter).

Three checks. On PGFTs of 16 to 256 hosts (one NIC per host):
- routes: SimGrid builds the fat tree itself (its FatTree zone from the same PGFT numbers) and
  routes it; scalebench's fabric with ``routing: d-mod-k`` must take the same cables, hop by hop,
  for every pair (``compare_routes``).
- times: ring, tree and all-to-all patterns (sim.engine.patterns) on the same fabric with the same
  link figures and the same routes (ECMP or D-mod-k, handed to SimGrid as a full zone), under
  SimGrid's plain max-min model (network/model:CM02, no cross traffic, no TCP window bound) and
  under its TCP model (LV08: bandwidth x 0.97, latency x 13.01, RTT-weighted sharing with S =
  20537 B, a window of 4 MiB / (2 x latency)). Latency sits on the hosts' links (switch hops add
  none), so every route has the same latency and CM02's sharing, weighted by route latency
  (network_cm02.cpp: ``sharing_penalty_ = latency``), is plain max-min as scalebench's is.
And on NCCL rings of V100 nodes (NVLink 2 inside, EDR between):
- library rings: one ring allreduce of a pipelined library (a hop's latency delays the data, not
  the sender: sim.costs.comm.ring_latency) with every edge's rate and delay as the detailed mode
  has them; SimGrid runs it as a transfer that holds the sender plus a notice that reaches the
  receiver the edge's delay later (simgrid_runner.py's ``library_ring``). The detailed mode's ring
  and the fast path's NCCL cost must both give SimGrid's time (``compare_library_rings``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sim.catalog import Link
from sim.engine import patterns
from sim.topology.fabric import CableKind, Fabric, pgft, pgft_counts

RUNNER = Path(__file__).resolve().with_name("simgrid_runner.py")
PYTHONS = ("/usr/bin/python3", "/usr/bin/python3.11")
TOLERANCE = 0.02
"""The issue's bar: CM02 and scalebench within 2 % on every case."""


def simgrid_python() -> str | None:
    """An interpreter that imports simgrid ($SCALEBENCH_SIMGRID_PYTHON first), or None."""
    candidates = [os.environ.get("SCALEBENCH_SIMGRID_PYTHON", ""), *PYTHONS]
    for python in candidates:
        if python and Path(python).exists():
            probe = subprocess.run([python, "-c", "import simgrid"], capture_output=True, text=True)
            if probe.returncode == 0:
                return python
    return None


def run_simgrid(spec: dict, python: str, timeout_s: float = 600) -> dict:
    with tempfile.TemporaryDirectory(prefix="scalebench-simgrid-") as tmp:
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        out = subprocess.run([python, str(RUNNER), str(path)], capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        lines = [x for x in out.stderr.splitlines() if x.strip() and not x.lstrip().startswith("->")]
        raise RuntimeError(f"SimGrid failed ({out.returncode}): {' | '.join(lines[-4:])}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the fabrics ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    m: tuple[int, ...]
    w: tuple[int, ...]
    p: tuple[int, ...]
    bandwidth_Bps: float = 12.5e9
    latency_s: float = 1e-6
    """Per host link (tx and rx): a message's route latency is twice it."""
    routing: str = "ecmp"

    @property
    def hosts(self) -> int:
        return pgft_counts(self.m, self.w)[0]


CASES = (
    Case("2-level 16 hosts, 2:1", (4, 4), (1, 2), (1, 1)),
    Case("2-level 64 hosts", (8, 8), (1, 8), (1, 1)),
    Case("3-level 64 hosts, 2:1 at the leaves", (4, 4, 4), (1, 2, 4), (1, 1, 1)),
    Case("3-level 256 hosts, parallel cables", (8, 8, 4), (1, 4, 2), (1, 1, 2)),
    Case("3-level 256 hosts, D-mod-k", (8, 8, 4), (1, 8, 8), (1, 1, 1), routing="d-mod-k"),
)


def fabric_of(case: Case, hop_latency_s: float = 0.0) -> Fabric:
    link = Link(name="cable", kind="custom", bandwidth_Bps=case.bandwidth_Bps, latency_s=0.0)
    kinds = tuple(CableKind(link, hop_latency_s, f"level{i + 1}-{i + 2}") for i in range(len(case.m) - 1))
    return pgft(case.m, case.w, case.p, kinds, 1, case.routing, case.name)


def host_link(case: Case, latency_s: float | None = None) -> Link:
    lat = case.latency_s if latency_s is None else latency_s
    return Link(name="nic", kind="custom", bandwidth_Bps=case.bandwidth_Bps, latency_s=2 * lat)


PATTERNS = {
    # name -> (sim.engine.patterns call, runner's pattern), sized so bandwidth and latency both count
    "ring": lambda n: {"kind": "ring", "ports": list(range(n)), "steps": 2 * (n - 1), "bytes": 4e6 / n},
    "ring (random order)": lambda n: {"kind": "ring", "ports": _shuffled(n), "steps": 2 * (n - 1), "bytes": 4e6 / n},
    "tree": lambda n: {"kind": "tree", "ports": list(range(n)), "bytes": 1e6},
    "alltoall (pairwise)": lambda n: {"kind": "alltoall_pairwise", "ports": list(range(n)), "bytes": 64e6 / (n * n)},
    "alltoall (all at once)": lambda n: {"kind": "alltoall", "ports": list(range(n)), "bytes": 64e6 / (n * n)},
}
ALL_AT_ONCE_HOSTS = 64
"""The all-at-once all-to-all (n^2 flows sharing links at once) runs on fabrics up to this many hosts
by default: 256 hosts are 65,280 concurrent flows, minutes in both simulators (``--all``)."""


def _shuffled(n: int) -> list[int]:
    import numpy as np

    return [int(x) for x in np.random.default_rng(7).permutation(n)]


def ours(net: patterns.PortNetwork, pattern: dict) -> float:
    kind, ports = pattern["kind"], pattern["ports"]
    if kind == "ring":
        return patterns.ring(net, ports, pattern["steps"], pattern["bytes"])
    if kind == "tree":
        return patterns.tree(net, ports, pattern["bytes"])
    if kind == "alltoall_pairwise":
        return patterns.alltoall_pairwise(net, ports, pattern["bytes"])
    return patterns.alltoall(net, ports, pattern["bytes"])


def pattern_pairs(pattern: dict) -> list[tuple[int, int]]:
    ports, kind = pattern["ports"], pattern["kind"]
    n = len(ports)
    if kind == "ring":
        return [(ports[i], ports[(i + 1) % n]) for i in range(n)]
    if kind == "tree":
        return [(ports[i], ports[(i - 1) // 2]) for i in range(1, n)] + [(ports[(i - 1) // 2], ports[i]) for i in range(1, n)]
    return [(a, b) for a in ports for b in ports if a != b]  # both all-to-alls


def routes_spec(case: Case, net: patterns.PortNetwork, pattern: dict, model: str, optim: str = "Full",
                cfg: tuple[str, ...] = ()) -> dict:
    """The full-zone platform: our links and our routes for every pair the pattern uses."""
    fabric = net.fabric
    names = fabric.switch_names
    links = []
    for c, (a, b, kind) in enumerate(fabric.cables):
        bw = fabric.kinds[kind].link.effective_Bps
        lat = fabric.kinds[kind].hop_latency_s
        links += [[f"c{c}.{names[a]}->{names[b]}", bw, lat], [f"c{c}.{names[b]}->{names[a]}", bw, lat]]
    routes = {f"{a},{b}": net.fabric_hops(a, b) for a, b in pattern_pairs(pattern)}
    return {"platform": "routes", "model": model, "ports": case.hosts, "host_bandwidth_Bps": case.bandwidth_Bps,
            "host_latency_s": case.latency_s, "links": links, "routes": routes, "pattern": pattern,
            "tcp_gamma": 1e18 if model == "CM02" else None, "optim": optim, "cfg": list(cfg)}


EXACT = ("surf/precision:1e-13",)
MODELS = {
    # label -> (SimGrid network model, update algorithm, other settings)
    "CM02": ("CM02", "Full", EXACT),
    "CM02 defaults": ("CM02", "Lazy", ()),
    "LV08": ("LV08", "Full", EXACT),
}
"""CM02 as an exact max-min solver: SimGrid's full update (every share recomputed at every event, as
scalebench does) and events 1e-13 s apart kept apart. SimGrid's defaults (network/optim:Lazy, which
re-solves only what it marks as changed, and surf/precision 1e-9 s, which merges events closer than
1 ns) drift from the exact shares by up to a few percent on all-to-alls. LV08 is SimGrid's TCP model
(its default model), with the same exact settings."""
LV08_LATENCY_FACTOR = 13.01
LV08_BANDWIDTH_FACTOR = 0.97
"""SimGrid's LV08 corrections (network_cm02.cpp), applied to our links to show what remains."""


def compare_times(case: Case, python: str, models: tuple[str, ...] = ("CM02", "LV08"),
                  all_at_once_hosts: int = ALL_AT_ONCE_HOSTS) -> list[dict]:
    """One row per pattern and model: scalebench's time, SimGrid's, the relative difference."""
    rows = []
    for name, make in PATTERNS.items():
        pattern = make(case.hosts)
        if pattern["kind"] == "alltoall" and case.hosts > all_at_once_hosts:
            continue
        net = patterns.PortNetwork(fabric_of(case), host_link(case))
        t_ours = ours(net, pattern)
        for label in models:
            model, optim, cfg = MODELS[label]
            t_sg = run_simgrid(routes_spec(case, net, pattern, model, optim, cfg), python)["time_s"]
            row = {"case": case.name, "hosts": case.hosts, "routing": case.routing, "pattern": name,
                   "model": label, "scalebench_s": t_ours, "simgrid_s": t_sg, "diff": t_ours / t_sg - 1}
            if model == "LV08":  # ours with LV08's latency and bandwidth factors: what sharing adds
                scaled = Case(case.name, case.m, case.w, case.p, case.bandwidth_Bps * LV08_BANDWIDTH_FACTOR,
                              case.latency_s * LV08_LATENCY_FACTOR, case.routing)
                t_scaled = ours(patterns.PortNetwork(fabric_of(scaled), host_link(scaled)), pattern)
                row["diff_with_factors"] = t_scaled / t_sg - 1
            rows.append(row)
    return rows


# -- routes: SimGrid's own fat tree ---------------------------------------------------------

def simgrid_node(fabric_counts: list[int], hosts: int, level: int, position: int) -> int:
    """SimGrid's id of a fat-tree node: hosts 0..n-1; switches counted down from 2n - 1 in level
    order (FatTreeZone::generate_switches)."""
    if level == 0:
        return position
    before = sum(fabric_counts[1:level])
    return 2 * hosts - 1 - (before + position)


def compare_routes(case: Case, python: str, pairs: list[tuple[int, int]] | None = None) -> tuple[int, list[str]]:
    """(pairs checked, mismatches) between SimGrid's FatTree routes and scalebench's D-mod-k routes.
    A hop is (child id, parent id, up or down) read from SimGrid's link names
    ``link_from_<child>_<parent>_<n>_UP|DOWN``."""
    d_mod_k = Case(case.name, case.m, case.w, case.p, case.bandwidth_Bps, case.latency_s, "d-mod-k")
    fabric = fabric_of(d_mod_k)
    net = patterns.PortNetwork(fabric, host_link(case))
    n = case.hosts
    pairs = pairs or [(a, b) for a in range(n) for b in range(n) if a != b]
    spec = {"platform": "fat_tree", "model": "CM02", "pgft": [list(case.m), list(case.w), list(case.p)],
            "bandwidth_Bps": case.bandwidth_Bps, "latency_s": case.latency_s, "dump_routes": pairs}
    theirs = run_simgrid(spec, python)["routes"]
    counts = pgft_counts(case.m, case.w)
    level_pos = {}
    for s, name in enumerate(fabric.switch_names):  # "L{level}s{position}"
        level, pos = name[1:].split("s")
        level_pos[s] = (int(level), int(pos))
    mismatches = []
    for a, b in pairs:
        mine = [("host", a, "UP")]
        for hop in net.fabric_hops(a, b):
            lower, upper, _ = fabric.cables[hop // 2]
            up = hop % 2 == 0
            mine.append((simgrid_node(counts, n, *level_pos[lower]), simgrid_node(counts, n, *level_pos[upper]),
                         "UP" if up else "DOWN"))
        mine.append(("host", b, "DOWN"))
        got = []
        for name in theirs[f"{a},{b}"]:
            parts = name.split("_")  # link_from_<child>_<parent>_<n>_<UP|DOWN>
            got.append((int(parts[2]), int(parts[3]), parts[5]))
        # the hosts' own links: child = the host
        mine_ids = [(a, got[0][1], "UP")] + mine[1:-1] + [(b, got[-1][1], "DOWN")] if got else mine
        if mine_ids != got:
            mismatches.append(f"{a}->{b}: scalebench {mine_ids} simgrid {got}")
    return len(pairs), mismatches


# -- library rings: the mechanism both engines model ------------------------------------------

LIBRARY_RINGS = (
    # (label, GPUs, GPUs per node, bytes): the smallest ring where latency and transfer are alike,
    # and two larger ones
    ("2 nodes x 2 V100, 256 KiB", 4, 2, 256 * 1024),
    ("2 nodes x 8 V100, 1 MiB", 16, 8, 1024 * 1024),
    ("8 nodes x 8 V100, 4 MiB", 64, 8, 4 * 1024 * 1024),
)
LIBRARY_RING_TOLERANCE = 1e-6


def library_ring_cluster(gpus: int, per_node: int):
    from sim.config import scenario_from_dict

    return scenario_from_dict({"workload": {"model": "resnet50"},
                               # one NIC per node, as SimGrid's platform here has (not the DGX-1's 4)
                               "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": "v100",
                                           "intra_link": "nvlink2", "inter_link": "ib_edr", "nics_per_node": 1}}).cluster


def library_ring_spec(cluster, n_bytes: float) -> dict:
    """SimGrid's ``library_ring`` for an NCCL ring allreduce of ``n_bytes`` over ``cluster`` (node-major,
    one switch): per edge the rate its per-flow link gives a connection (sim.costs.comm.per_flow_cluster,
    slowed by its class's pace) and its delay, the link's alpha + NCCL's hop latency of the
    protocol its tuner picks (sim.costs.comm.ring_latency); 2(n-1) steps of S/n."""
    from sim.costs.comm import CommSpec, per_flow_cluster, ring_latency

    spec = CommSpec("nccl", "ring")
    lat = ring_latency("allreduce", n_bytes, cluster, spec)
    flow = per_flow_cluster(cluster, spec)
    n, g = cluster.world_size, cluster.gpus_per_node
    wire, delay = [], []
    for i in range(n):
        inside = i % g != g - 1
        link = flow.intra_link if inside else flow.inter_link
        wire.append(link.effective_Bps / (lat.intra_pace if inside else lat.pace))
        delay.append(link.alpha_s + (lat.intra_hop_s if inside else lat.inter_hop_s))
    return {"platform": "library_ring", "model": "CM02", "optim": "Full", "cfg": list(EXACT), "tcp_gamma": 1e18,
            "wire_Bps": wire, "delay_s": delay, "steps": 2 * (n - 1), "bytes": n_bytes / n, "base_s": lat.base_s,
            "protocol": lat.protocol}


def detailed_ring_s(cluster, n_bytes: float, flow_engine: str = "event") -> float:
    """The detailed mode's NCCL ring allreduce of ``n_bytes`` over every rank, alone on one switch."""
    from sim.costs.comm import CommSpec
    from sim.engine.detailed_collectives import Collectives, isolated_ring_allreduce_s
    from sim.engine.periodic import PeriodicCollectives

    engine = Collectives if flow_engine == "event" else PeriodicCollectives
    return isolated_ring_allreduce_s(cluster, n_bytes, CommSpec("nccl", "ring"), engine)


def compare_library_rings(python: str, rings=LIBRARY_RINGS) -> list[dict]:
    """One row per ring: SimGrid's time, the detailed mode's (event and periodic engines) and the fast path's."""
    from sim.costs.comm import CommSpec, allreduce_cost

    rows = []
    for label, gpus, per_node, n_bytes in rings:
        cluster = library_ring_cluster(gpus, per_node)
        spec = library_ring_spec(cluster, n_bytes)
        theirs = run_simgrid(spec, python)["time_s"]
        fast = allreduce_cost(n_bytes, cluster, CommSpec("nccl", "ring")).time_s
        rows.append({"case": label, "protocol": spec["protocol"], "simgrid_s": theirs,
                     "event_s": detailed_ring_s(cluster, n_bytes, "event"),
                     "periodic_s": detailed_ring_s(cluster, n_bytes, "periodic"), "fast_s": fast})
    return rows


def library_report(rows: list[dict]) -> str:
    lines = [f"{'NCCL ring allreduce':<28} {'proto':<7} {'SimGrid':>10} {'event':>10} {'periodic':>10} {'fast path':>10}",
             f"{'':<28} {'':<7} {'us':>10} {'vs SimGrid':>10} {'vs SimGrid':>10} {'vs SimGrid':>10}"]
    for r in rows:
        t = r["simgrid_s"]
        lines.append(f"{r['case']:<28} {r['protocol']:<7} {t * 1e6:>10.3f} {100 * (r['event_s'] / t - 1):>+9.3f}% "
                     f"{100 * (r['periodic_s'] / t - 1):>+9.3f}% {100 * (r['fast_s'] / t - 1):>+9.3f}%")
    return "\n".join(lines) + "\n"


def report(rows: list[dict]) -> str:
    head = f"{'case':<36} {'pattern':<23} {'SimGrid model':<14} {'scalebench':>11} {'SimGrid':>11} {'diff':>8} {'w/ factors':>10}"
    lines = [head, f"{'':<36} {'':<23} {'':<14} {'ms':>11} {'ms':>11} {'%':>8} {'%':>10}"]
    for r in rows:
        factors = f"{100 * r['diff_with_factors']:>+10.2f}" if "diff_with_factors" in r else f"{'':>10}"
        lines.append(f"{r['case']:<36} {r['pattern']:<23} {r['model']:<14} {r['scalebench_s'] * 1e3:>11.4f} "
                     f"{r['simgrid_s'] * 1e3:>11.4f} {100 * r['diff']:>+8.2f} {factors}")
    return "\n".join(lines) + "\n"


def run_suite(python: str, cases=CASES, models: tuple[str, ...] = tuple(MODELS), all_at_once_hosts: int = ALL_AT_ONCE_HOSTS,
              progress=None) -> tuple[int, str]:
    """Routes and times on every case: (exit status, report). Status 1 when a route differs or a
    CM02 time is more than TOLERANCE off."""
    rows, failures = [], []
    for case in cases:
        checked, mismatches = compare_routes(case, python)
        if mismatches:
            failures.append(f"{case.name}: {len(mismatches)} of {checked} routes differ from SimGrid's, e.g. {mismatches[0]}")
        if progress:
            progress(f"{case.name}: {checked} routes, {len(mismatches)} differ")
        case_rows = compare_times(case, python, models, all_at_once_hosts)
        rows += case_rows
        if progress:
            progress(report(case_rows))
        failures += [f"{r['case']} {r['pattern']}: {100 * r['diff']:+.2f} % against CM02" for r in case_rows
                     if r["model"] == "CM02" and abs(r["diff"]) > TOLERANCE]
    text = report(rows)
    library = compare_library_rings(python)
    text += "\n" + library_report(library)
    for r in library:
        for engine in ("event_s", "periodic_s", "fast_s"):
            if abs(r[engine] / r["simgrid_s"] - 1) > LIBRARY_RING_TOLERANCE:
                failures.append(f"{r['case']}: {engine[:-2]} {100 * (r[engine] / r['simgrid_s'] - 1):+.4f} % against SimGrid")
    text += ("\nPASS: every route is SimGrid's; every CM02 time within "
             f"{100 * TOLERANCE:g} %; every library ring within {LIBRARY_RING_TOLERANCE:g}\n" if not failures
             else "\nFAIL:\n  " + "\n  ".join(failures) + "\n")
    return (1 if failures else 0), text
