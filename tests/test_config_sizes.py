"""Sizes in configs are written as on the command line (README: ``65536``, ``256M``, ``1G``,
binary as nccl-tests reads them), in every key whose name carries a size unit: a plain number is
in the key's unit, a suffixed size is converted to it."""

from __future__ import annotations

import pytest

from experiments.config import expand, experiment_from_dict
from sim.config import scenario_from_dict
from sim.errors import ConfigError

LINK = {"base": "tcp_10gbe"}


def _link(**values):
    spec = {"workload": "mlp", "cluster": {"gpus": 2, "gpus_per_node": 1, "inter_link": "mine"},
            "catalog": {"links": {"mine": {**LINK, **values}}}}
    return scenario_from_dict(spec).cluster.inter_link


@pytest.mark.parametrize(("written", "bytes_"), [
    ("9K", 9 * 1024), (9000, 9000), ("9000", 9000), ("9000B", 9000), ("9KiB", 9 * 1024), ("1.5K", 1536)])
def test_mtu_bytes_takes_a_size(written, bytes_):
    assert _link(mtu_bytes=written).mtu_bytes == bytes_


@pytest.mark.parametrize(("written", "fragment"), [
    ("9Q", "a size in bytes such as"), ("0.3K", "a whole number of bytes"), (1.5, "a positive integer"),
    ("-1K", "a whole number of bytes >= 1"), (40, "more than the 52 bytes")])
def test_a_bad_mtu_is_one_line_naming_the_field(written, fragment):
    with pytest.raises(ConfigError) as err:
        _link(mtu_bytes=written)
    assert err.value.field == "catalog.links.mine.mtu_bytes"
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_mib_and_gib_keys_take_a_size_in_bytes_or_a_number_in_their_unit():
    assert _link(tcp_window_MiB="512K").tcp_window_bytes == 512 * 1024
    assert _link(tcp_window_MiB=4).tcp_window_bytes == 4 * 2**20
    strategy = {"bucket_mib": "512K", "first_bucket_mib": "1M", "fusion_mib": "64M"}
    s = scenario_from_dict({"workload": "mlp", "strategy": strategy}).strategy
    assert (s.bucket_bytes, s.first_bucket_bytes, s.fusion_bytes) == (524288, 1048576, 64 * 1048576)
    gpu = {"peak_tflops": {"fp32": 10}, "memory_bandwidth_GBps": 900, "memory_GiB": "16G", "source": "test"}
    c = scenario_from_dict({"workload": "mlp", "cluster": {"gpu": "g"}, "catalog": {"gpus": {"g": gpu}}}).cluster
    assert c.gpu.memory_bytes == 16 * 2**30


def test_a_swept_size_is_read_the_same_way():
    exp = experiment_from_dict({"name": "x", "workload": "mlp", "cluster": {"gpus": 2},
                                "sweep": {"strategy.bucket_mib": ["1M", 25]}})
    points, skipped = expand(exp)
    assert skipped == []
    buckets = [scenario_from_dict(p.spec).strategy.bucket_bytes for p in points]
    assert buckets == [2**20, 25 * 2**20]
