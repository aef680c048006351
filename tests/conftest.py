"""Shared fixtures: small hand-computable clusters and scenarios."""

from __future__ import annotations

import pytest

from sim.catalog import GPU, Link, builtin_catalog

MINI_EXPERIMENT = "name: mini\nworkload: mlp\ncluster: {gpus_per_node: 2}\nsweep: {cluster.gpus: [1, 2]}\n"
"""A two-point experiment: the smallest `scalebench run` whose results the plot and report cases read."""


@pytest.fixture(scope="module")
def mini_results(tmp_path_factory):
    """results/mini of MINI_EXPERIMENT, run once per module for the plot and report cases."""
    from scalebench.cli import main

    root = tmp_path_factory.mktemp("mini")
    (root / "mini.yaml").write_text(MINI_EXPERIMENT)
    assert main(["run", str(root / "mini.yaml"), "--results", str(root), "--jobs", "1", "--no-progress"]) == 0
    return root / "mini"


@pytest.fixture(scope="session")
def catalog():
    return builtin_catalog()


def pytest_collection_modifyitems(config, items):
    """Tests marked ``slow`` run only when asked for (``-m slow``, as ``tox -e slow`` does)."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="a long run: select it with -m slow (tox -e slow)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def make_link(name: str = "test", bandwidth_Bps: float = 1e9, latency_s: float = 1e-5) -> Link:
    """A link with round numbers: alpha = latency_s, effective bandwidth = bandwidth_Bps."""
    return Link(name=name, kind="custom", bandwidth_Bps=bandwidth_Bps, latency_s=latency_s, efficiency=1.0)


def alpha_beta_links(*names: str) -> dict:
    """Catalog entries that turn built-in links into their alpha-beta twins (kind custom): the
    same figures with no transport or library model on top, where the detailed mode's per-flow
    network and the fast path's counted steps must agree exactly (sim/costs/backends/alpha_beta.py)."""
    return {name: {"base": name, "kind": "custom"} for name in names if name in builtin_catalog().links}


def make_gpu(tflops: float = 1.0, mem_GBps: float = 1000.0) -> GPU:
    return GPU(name="test-gpu", peak_flops={"fp32": tflops * 1e12}, memory_bandwidth_Bps=mem_GBps * 1e9,
               memory_bytes=16e9, efficiency=1.0)
