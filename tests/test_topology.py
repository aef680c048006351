"""Fabrics against closed forms: sizes, oversubscription ratios, bisection bandwidth, rail-local and
cross-rail traffic, ECMP collisions against balls into bins, and one-line errors for bad input.

Times come from the event engine on the fabric's NIC ports (sim.engine.patterns), checked to 1e-12
relative against alpha + S / rate; collision counts are statistical (3 standard errors).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from sim.catalog import builtin_catalog
from sim.cluster import cluster_from_dict
from sim.costs.tiers import bisection_pairs, flows_view
from sim.engine import patterns
from sim.errors import ConfigError
from sim.topology.fabric import CableKind, fat_tree_params, pgft, pgft_counts, rail_optimized
from sim.topology.routing import Router, flow_key
from tests.conftest import make_link

B = 10e9
HOST = make_link("nic", B, 2e-6)
CABLE = make_link("cable", B, 0.0)
RTOL = 1e-12


def tree(tiers: int, radix: int, over: tuple[float, ...], hosts: int, routing: str = "d-mod-k", hop_s: float = 0.0,
         subtrees: int | None = None):
    m, w, p = fat_tree_params(tiers, radix, over, hosts, subtrees)
    names = ("leaf-spine", "spine-core")
    kinds = tuple(CableKind(CABLE, hop_s, names[i]) for i in range(tiers - 1))
    return pgft(m, w, p, kinds, 1, routing, "test")


# -- sizes and ratios -----------------------------------------------------------------------

@pytest.mark.parametrize("k", [4, 8, 16])
def test_a_k_ary_fat_tree_has_k3_over_4_hosts_and_its_switch_counts(k):
    """Al-Fares et al. (SIGCOMM 2008): k pods of k/2 edge and k/2 aggregation switches, (k/2)^2
    cores, k^3/4 hosts; every tier has k^3/4 cables."""
    f = tree(3, k, (1, 1), k ** 3 // 4)
    levels = [f.switch_level.count(level) for level in (1, 2, 3)]
    assert f.host_slots == k ** 3 // 4
    assert levels == [k * k // 2, k * k // 2, k * k // 4]
    tiers = [sum(1 for a, _, kind in f.cables if kind == t) for t in (0, 1)]
    assert tiers == [k ** 3 // 4, k ** 3 // 4]
    assert pgft_counts(*f.pgft[:2]) == [k ** 3 // 4, *levels]


@pytest.mark.parametrize("radix,over", [(8, 1), (8, 3), (8, 7), (32, 3), (12, 2)])
def test_every_leaf_splits_its_radix_down_to_up_as_the_oversubscription(radix, over):
    f = tree(2, radix, (over,), 3 * radix * over // (1 + over))  # three leaves
    adj = f.adjacency()
    for s, level in enumerate(f.switch_level):
        if level != 1:
            continue
        down = sum(1 for slot in f.host_ports if slot[0] == s)
        up = len(adj[s])
        assert down + up == radix and down == over * up


def test_three_tiers_take_an_oversubscription_each():
    f = tree(3, 8, (3, 1), 100)  # leaves 6:2, spines 4:4
    adj = f.adjacency()
    spine = f.switch_level.index(2)
    downs = sum(1 for v, _ in adj[spine] if f.switch_level[v] == 1)
    ups = sum(1 for v, _ in adj[spine] if f.switch_level[v] == 3)
    assert (downs, ups) == (4, 4)
    assert f.host_slots == 6 * 4 * 5  # pods of 4 leaves x 6 hosts, as few as hold 100


# -- bisection bandwidth ----------------------------------------------------------------------

@pytest.mark.parametrize("tiers,over,hosts", [(2, (1,), 32), (2, (3,), 48), (3, (1, 1), 64), (3, (3, 1), 96),
                                              (3, (1, 3), 96), (3, (3, 3), 288)])
def test_bisection_traffic_gets_the_closed_form_share(tiers, over, hosts):
    """Half of the hosts (the first pods or leaves) exchange S with the other half. The cables across
    the bisection carry B x hosts / 2 / prod(o) per direction (each tier's uplinks are 1/o of what
    enters it), so every flow gets B / prod(o): t = alpha + S prod(o) / B (D-mod-k spreads them
    without collisions)."""
    radix = 8 if tiers == 3 else 16
    f = tree(tiers, radix, over, hosts)
    assert f.host_slots == hosts
    slots = list(range(hosts))
    pairs = bisection_pairs(slots, 1)
    factor = math.prod(over)
    view = flows_view(f, pairs, B)
    assert view.load_factor == pytest.approx(factor, rel=RTOL)
    net = patterns.PortNetwork(f, HOST)
    s = 1e9
    assert patterns.pairs(net, [(a, b) for a, _, b, _ in pairs], s) == pytest.approx(HOST.alpha_s + s * factor / B, rel=RTOL)


# -- rails ----------------------------------------------------------------------------------

def rails(over: float = 1.0, groups: int = 2, routing: str = "ecmp"):
    radix = 8
    down = round(radix * over / (1 + over))
    up = radix - down
    return rail_optimized(down, 4, groups, up, (CableKind(CABLE, 0.0, "rail-spine"),), routing, "rails"), down


def test_rail_local_traffic_never_touches_a_spine():
    """NIC j of every node of a group sits on rail switch j: NIC j to NIC j inside a group is one
    switch; across groups it is rail switch, spine, rail switch."""
    f, per_group = rails()
    net = patterns.PortNetwork(f, HOST)
    nics = 4
    inside = [(a * nics + j, b * nics + j) for a in range(per_group) for b in range(per_group) if a != b for j in range(nics)]
    for src, dst in inside:
        assert net.fabric_hops(src, dst) == []
    across = (0 * nics + 2, per_group * nics + 2)
    assert len(net.fabric_hops(*across)) == 2
    # an all-to-all of each rail inside a group: every NIC sends (n-1) S and is the only bottleneck
    s = 1e8
    t = patterns.pairs(net, inside, s)
    assert t == pytest.approx(HOST.alpha_s + (per_group - 1) * s / B, rel=RTOL)
    assert sum(stat for name, stat in zip(net.flows.link_names, net.flows.link_bytes, strict=True) if "spine" in name) == 0


@pytest.mark.parametrize("over", [1.0, 3.0])
def test_cross_rail_traffic_goes_through_the_spines_at_one_over_o(over):
    """Every NIC j of group 0 sends to NIC j+1 of another node of the group (a cross-rail shift):
    all of it climbs to the spines, 2 x S per flow crosses rail-spine cables, and with the rail
    switches' down:up = o each flow gets B / o (fluid: the flows spread evenly over the spines)."""
    f, per_group = rails(over, groups=1)
    nics = 4
    pairs = [(a, j, (a + 1) % per_group, (j + 1) % nics) for a in range(per_group) for j in range(nics)]
    view = flows_view(f, pairs, B)
    assert view.load_factor == pytest.approx(over, rel=RTOL)
    assert view.bottleneck == ("rail-spine" if over > 1 else "nic")
    net = patterns.PortNetwork(f, HOST)
    s = 1e8
    patterns.pairs(net, [(a * nics + i, b * nics + j) for a, i, b, j in pairs], s)
    spine_bytes = sum(b for name, b in zip(net.flows.link_names, net.flows.link_bytes, strict=True) if "spine" in name)
    assert spine_bytes == pytest.approx(2 * s * len(pairs), rel=RTOL)


# -- ECMP -----------------------------------------------------------------------------------

def occupied_bins_moments(bins: int, balls: int) -> tuple[float, float]:
    """Mean and variance of the number of non-empty bins after ``balls`` uniform throws."""
    q1, q2 = (1 - 1 / bins) ** balls, (1 - 2 / bins) ** balls
    mean = bins * (1 - q1)
    var = bins * q1 + bins * (bins - 1) * q2 - bins * bins * q1 * q1
    return mean, var


@pytest.mark.parametrize("uplinks,flows", [(8, 8), (8, 4), (16, 16)])
def test_ecmp_collisions_match_balls_into_bins(uplinks, flows):
    """``flows`` flows leave a leaf with ``uplinks`` uplinks toward other leaves; ECMP hashes each to
    an uplink independently, so the uplinks used are the non-empty bins of balls into bins:
    E = L (1 - (1 - 1/L)^F). Over 400 seeds the mean is within 3 standard errors of it, and the
    share of flows that share their uplink matches 1 - (1 - 1/L)^(F-1)."""
    f = tree(2, 2 * uplinks, (1,), 2 * uplinks * uplinks, routing="ecmp")
    leaf0, leaf1 = f.host_ports[0][0], f.host_ports[uplinks][0]
    trials, used, shared = 400, [], 0
    for seed in range(trials):
        router = Router(f, seed)
        first_hops = [router.path(leaf0, leaf1, flow_key(h, 0, uplinks + h, 0))[0] for h in range(flows)]
        used.append(len(set(first_hops)))
        counts = {x: first_hops.count(x) for x in first_hops}
        shared += sum(1 for x in first_hops if counts[x] > 1)
    mean, var = occupied_bins_moments(uplinks, flows)
    assert abs(np.mean(used) - mean) < 3 * math.sqrt(var / trials)
    expected_shared = 1 - (1 - 1 / uplinks) ** (flows - 1)
    assert shared / (trials * flows) == pytest.approx(expected_shared, abs=0.05)


def test_ecmp_paths_are_shortest_and_d_mod_k_spreads_a_shift_evenly():
    f = tree(3, 8, (1, 1), 128, routing="ecmp")
    router = Router(f, seed=3)
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = (int(x) for x in rng.integers(0, f.host_slots, 2))
        s, t = f.host_ports[a][0], f.host_ports[b][0]
        path = router.path(s, t, flow_key(a, b))
        assert len(path) == router.distances_to(t)[s]
    g = tree(3, 8, (1, 1), 128, routing="d-mod-k")
    shift = [(h, 0, (h + 16) % 128, 0) for h in range(128)]  # every flow leaves its pod
    net = patterns.PortNetwork(g, HOST)
    s = 1e8
    assert patterns.pairs(net, [(a, b) for a, _, b, _ in shift], s) == pytest.approx(HOST.alpha_s + s / B, rel=RTOL)


# -- bad input ------------------------------------------------------------------------------

def build(topology, nodes: int = 16, nics: int = 1, **extra):
    return cluster_from_dict({"nodes": nodes, "gpus_per_node": 1, "nics_per_node": nics, "topology": topology, **extra},
                             builtin_catalog())


def write(tmp_path, text: str) -> str:
    path = tmp_path / "fabric.yaml"
    path.write_text(text)
    return str(path)


GOOD_FILE = """
switches: [{name: leaf0, tier: leaf}, {name: leaf1, tier: leaf}, {name: spine0, tier: spine}]
cables:
  - {a: leaf0, b: spine0, link: ib_hdr, count: 2}
  - {a: leaf1, b: spine0, link: ib_hdr, count: 2}
hosts: [{switch: leaf0, count: 4}, {switch: leaf1, count: 4}]
"""


def test_a_fabric_file_is_read_with_its_tiers_and_parallel_cables(tmp_path):
    c = build(write(tmp_path, GOOD_FILE), nodes=8)
    f = c.topology.fabric
    assert f.kind == "file" and f.host_slots == 8 and len(f.cables) == 4
    assert {k.tier for k in f.kinds} == {"leaf-spine"}
    assert c.oversubscription == pytest.approx(1.0)  # a contiguous ring crosses between leaves twice


def test_the_documented_fabric_file_runs_in_the_detailed_mode():
    from pathlib import Path

    from sim.config import scenario_from_dict
    from sim.simulate import simulate

    path = str(Path(__file__).resolve().parents[1] / "docs" / "fabric_example.yaml")
    s = scenario_from_dict({"workload": "resnet50", "cluster": {"gpus": 64, "gpus_per_node": 4, "topology": path,
                                                                "placement": "random"},
                            "simulation": {"fidelity": "detailed"}})
    result = simulate(s)
    assert s.cluster.topology.fabric.host_slots == 16
    assert {link.tier for link in result.links} == {"gpu", "nic", "leaf-spine"}
    # 200 Gb/s uplinks, 2:1 at the leaves: the leaf-spine cables carry bytes, none is busier than the iteration
    assert all(0 < link.busy_s <= result.iteration_time_s for link in result.links)


def test_a_fabric_file_named_in_a_config_is_found_beside_it(tmp_path, monkeypatch):
    from sim.config import load_scenario

    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "fabric.yaml").write_text(GOOD_FILE)
    (folder / "c.yaml").write_text("workload: mlp\ncluster: {nodes: 8, gpus_per_node: 1, topology: fabric.yaml}\n")
    monkeypatch.chdir(tmp_path)
    assert load_scenario(folder / "c.yaml").cluster.topology.fabric.host_slots == 8


@pytest.mark.parametrize("topology,nodes,field", [
    ({"kind": "fat_tree", "tiers": 2, "radix": 4}, 16, "cluster.topology.radix"),            # 8 host ports at most
    ({"kind": "fat_tree", "tiers": 3, "radix": 4, "pods": 9}, 16, "cluster.topology.radix"),  # pods > radix
    ({"kind": "fat_tree", "radix": 8, "oversubscription": 2}, 16, "cluster.topology.radix"),  # 8 ports do not split 2:1
    ({"kind": "fat_tree", "tiers": 4}, 16, "cluster.topology.tiers"),
    ({"kind": "fat_tree", "oversubscription": [2, 1]}, 16, "cluster.topology.oversubscription"),
    ({"kind": "fat_tree", "link": "no_such_link"}, 16, "cluster.topology.link"),
    ({"kind": "rail_optimized", "radix": 8}, 64, "cluster.topology.radix"),                 # 16 groups x 4 rails
    ({"kind": "torus"}, 16, "cluster.topology.kind"),
    ({"kind": "fat_tree", "pods": 2}, 16, "cluster.topology.pods"),
    ({"kind": "fat_tree", "spines": 2}, 16, "cluster.topology.spines"),
], ids=["cannot-hold", "pods-over-radix", "radix-does-not-tile", "tiers", "tier-count", "unknown-link", "rails-too-many",
        "unknown-kind", "pods-with-two-tiers", "unknown-key"])
def test_bad_topologies_name_their_field(topology, nodes, field):
    with pytest.raises(ConfigError) as err:
        build(topology, nodes=nodes, nics=4 if topology.get("kind") == "rail_optimized" else 1)
    assert err.value.field == field


@pytest.mark.parametrize("text,field", [
    (GOOD_FILE.replace("b: spine0, link: ib_hdr, count: 2}\n  - {a: leaf1", "b: spin0, link: ib_hdr, count: 2}\n  - {a: leaf1"),
     "fabric.yaml.cables[0].b"),
    (GOOD_FILE.replace("{switch: leaf1, count: 4}", "{switch: leaf2, count: 4}"), "fabric.yaml.hosts[1].switch"),
    (GOOD_FILE.replace("  - {a: leaf1, b: spine0, link: ib_hdr, count: 2}\n", ""), "fabric.yaml.cables"),
    (GOOD_FILE.replace("count: 4}]", "count: 3}]"), "cluster.topology"),
    (GOOD_FILE + "routing: d-mod-k\n", "fabric.yaml.routing"),
], ids=["unknown-switch-in-cable", "unknown-switch-in-hosts", "disconnected", "cannot-hold", "routing"])
def test_bad_fabric_files_name_their_field(tmp_path, text, field):
    with pytest.raises(ConfigError) as err:
        build(write(tmp_path, text), nodes=8)
    assert err.value.field.endswith(field)


@pytest.mark.parametrize("placement,field", [
    ([0, 1, 2], "cluster.placement"), ([0] * 16, "cluster.placement"), (list(range(15)) + [999], "cluster.placement[15]"),
    ("scattered", "cluster.placement"),
])
def test_bad_placements_name_their_field(placement, field):
    with pytest.raises(ConfigError) as err:
        build({"kind": "fat_tree", "radix": 8}, placement=placement)
    assert err.value.field == field


def test_a_single_switch_oversubscription_is_refused_beside_a_fabric():
    with pytest.raises(ConfigError) as err:
        build({"kind": "fat_tree", "radix": 8}, oversubscription=2)
    assert err.value.field == "cluster.oversubscription"


def test_the_cli_says_it_in_one_line_and_exits_2(tmp_path):
    path = write(tmp_path, GOOD_FILE.replace("b: spine0, link: ib_hdr, count: 2}\n  - {a: leaf1",
                                             "b: spin0, link: ib_hdr, count: 2}\n  - {a: leaf1"))
    config = tmp_path / "scenario.yaml"
    config.write_text(f"workload: mlp\ncluster: {{nodes: 8, gpus_per_node: 1, topology: {path}}}\n")
    out = subprocess.run([sys.executable, "-m", "scalebench", "simulate", str(config)], capture_output=True, text=True)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "cables[0].b" in out.stderr and "spin0" in out.stderr


def test_link_utilisation_is_bytes_over_capacity_times_the_iteration():
    """By hand: 100 Gb/s is 12.5 GB/s; over a 1 s iteration 2.5 GB is 20 % of it, whether the link
    was busy 0.2 s (at its full rate) or 0.8 s (at a quarter); the busy share says the latter."""
    from sim.result import IterationResult, LinkStat

    fast = LinkStat("a", "nic", 12.5e9, 2.5e9, 0.2)
    slow = LinkStat("b", "nic", 12.5e9, 2.5e9, 0.8)
    full = LinkStat("c", "nic", 12.5e9, 10e9, 0.8)
    assert fast.utilisation(1.0) == slow.utilisation(1.0) == pytest.approx(0.2)
    assert (fast.busy_share(1.0), slow.busy_share(1.0)) == (pytest.approx(0.2), pytest.approx(0.8))
    result = IterationResult.__new__(IterationResult)
    object.__setattr__(result, "links", (slow, fast, full))
    assert [s.name for s in result.hottest_links(3)] == ["c", "b", "a"]  # the most carried first; ties: busy longer


def test_no_link_carries_more_than_its_capacity_while_busy():
    """bytes <= capacity x busy time on every link of a detailed run: utilisation <= busy share <= 1."""
    from sim.config import scenario_from_dict
    from sim.simulate import simulate

    s = scenario_from_dict({"workload": "resnet50", "cluster": {"gpus": 32, "gpus_per_node": 4, "topology": "fat_tree"},
                            "simulation": {"fidelity": "detailed"}})
    result = simulate(s)
    for link in result.links:
        assert link.utilisation(result.iteration_time_s) <= link.busy_share(result.iteration_time_s) * (1 + 1e-9) <= 1 + 1e-9
