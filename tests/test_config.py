"""Bad input gets one line naming the field, the value and what is allowed."""

from __future__ import annotations

import pytest

from sim.catalog import builtin_catalog
from sim.config import scenario_from_dict
from sim.errors import ConfigError

BASE = {"workload": {"model": "mlp"}, "cluster": {"gpus": 8, "gpus_per_node": 4}}


def with_(section: str, **values):
    spec = {k: dict(v) for k, v in BASE.items()}
    spec.setdefault(section, {}).update(values)
    return spec


@pytest.mark.parametrize("spec,field,fragment", [
    (with_("workload", model="resnet5O"), "workload.model", "allowed: one of"),
    (with_("cluster", gpu="v1000"), "cluster.gpu", "v100"),
    (with_("cluster", inter_link="tcp_9gbe"), "cluster.inter_link", "tcp_10gbe"),
    (with_("cluster", gpus=12, gpus_per_node=8), "cluster.gpus", "multiple of gpus_per_node=8"),
    (with_("cluster", gpus=8, nodes=3, gpus_per_node=4), "cluster.gpus", "3 x 4 = 12"),
    (with_("cluster", gpus=0), "cluster.gpus", "positive integer"),
    (with_("cluster", gpus=-4), "cluster.gpus", "positive integer"),
    (with_("cluster", gpus_per_node=2.5), "cluster.gpus_per_node", "positive integer"),
    (with_("cluster", oversubscription=0.5), "cluster.oversubscription", ">= 1"),
    (with_("strategy", bucket_mib=0), "strategy.bucket_mib", "positive"),
    (with_("strategy", collective="butterfly"), "strategy.collective", "ring"),
    (with_("strategy", overlap="yes"), "strategy.overlap", "true or false"),
    (with_("strategy", bucket_size=25), "strategy.bucket_size", "known keys"),
    (with_("workload", batch_size=0), "workload.batch_size", "positive integer"),
    ({"cluster": {"gpus": 2}}, "workload", "workload section"),
    ({**BASE, "clutser": {}}, "config.clutser", "known keys"),
    ({**BASE, "catalog": {"links": {"x": {"bandwidth_Gbps": -1, "latency_us": 1}}}}, "catalog.links.x.bandwidth_Gbps", "positive"),
    ({**BASE, "catalog": {"links": {"x": {"latency_us": 1}}}}, "catalog.links.x", "exactly one of"),
    ({**BASE, "catalog": {"gpus": {"g": {"peak_tflops": {"fp33": 1}, "memory_bandwidth_GBps": 1, "memory_GiB": 1}}}},
     "catalog.gpus.g.peak_tflops", "fp32"),
])
def test_bad_input_names_the_field(spec, field, fragment):
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(spec)
    message = str(info.value)
    assert message.startswith(field + ":"), message
    assert fragment in message
    assert "\n" not in message


def test_fewer_gpus_than_a_node_is_one_partial_node():
    s = scenario_from_dict(with_("cluster", gpus=2, gpus_per_node=8))
    assert (s.cluster.nodes, s.cluster.gpus_per_node) == (1, 2)


def test_inline_catalog_adds_a_link_without_code():
    spec = {**BASE, "cluster": {"gpus": 8, "gpus_per_node": 4, "inter_link": "my_25g"},
            "catalog": {"links": {"my_25g": {"kind": "roce", "bandwidth_Gbps": 25, "latency_us": 2, "efficiency": 0.9}}}}
    link = scenario_from_dict(spec).cluster.inter_link
    assert link.effective_Bps == pytest.approx(25e9 / 8 * 0.9)
    assert link.alpha_s == pytest.approx(2e-6)


def test_every_catalog_entry_cites_a_source():
    cat = builtin_catalog()
    for entry in [*cat.gpus.values(), *cat.links.values()]:
        assert len(entry.source) > 20, entry.name


def test_catalog_units_are_converted_once():
    cat = builtin_catalog()
    assert cat.links["tcp_10gbe"].bandwidth_Bps == pytest.approx(1.25e9)
    assert cat.links["nvlink4"].bandwidth_Bps == pytest.approx(450e9)
    assert cat.links["ib_fdr"].latency_s == pytest.approx(1e-6)
    assert cat.gpus["v100"].peak_flops["fp32"] == pytest.approx(15.7e12)
    assert cat.gpus["h100"].memory_bandwidth_Bps == pytest.approx(3.35e12)


def test_yaml_reads_exponent_numbers_as_floats(tmp_path):
    """PyYAML's YAML 1.1 reads 1.5e9 as a string; scalebench's loader reads it as a float."""
    from sim.config import read_yaml

    f = tmp_path / "x.yaml"
    f.write_text("a: 1.5e9\nb: 1e9\nc: 3\nd: '1e9'\n")
    assert read_yaml(f) == {"a": 1.5e9, "b": 1e9, "c": 3, "d": "1e9"}
