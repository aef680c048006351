"""scalebench regress: an unchanged model passes, a slowed network fails, tolerances, --update;
and the README's claims table generator."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from experiments.claims import BEGIN, CLAIMS, END, claims_markdown, update_readme
from experiments.regress import compare, run_suite
from scalebench.cli import main
from sim.catalog import Catalog
from sim.errors import ConfigError

SUITE = {
    "tolerance": {"efficiency_pp": 1.0, "iteration_time_pct": 5.0},
    "scenarios": [
        {"name": "net",
         "workload": {"model": "w", "batch_size": 16, "layers": [
             {"name": "a", "param_count": 3_000_000, "fwd_flops": 1.5e9, "activation_elems": 100_000},
             {"name": "b", "param_count": 9_000_000, "fwd_flops": 1.0e9, "activation_elems": 1000}]},
         "cluster": {"gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2", "inter_link": "tcp_25gbe"},
         "sweep": {"cluster.gpus": [1, 8, 32], "strategy.collective": ["ring", "hierarchical"]}},
        {"name": "tiny", "tolerance": {"efficiency_pp": 0.1},
         "workload": {"model": "mlp"}, "cluster": {"gpu": "cpu", "inter_link": "tcp_1gbe"},
         "sweep": {"cluster.gpus": [1, 2]}},
    ],
}


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    assert main(["regress", "--suite", str(path), "--baselines", str(tmp_path / "baselines"), "--update"]) == 0
    return path


def test_unchanged_model_passes(suite, tmp_path, capsys):
    capsys.readouterr()
    assert main(["regress", "--suite", str(suite), "--baselines", str(tmp_path / "baselines")]) == 0
    out = capsys.readouterr().out
    assert out.count("\nOK ") == 8 and "passed (8 OK)" in out


def slow_the_network(monkeypatch, factor: float) -> None:
    """Every link a cluster resolves ``factor`` times slower: line rate, per-flow cap and TCP window
    divided by it, latencies multiplied (a change of the network model that regress must see)."""
    original = Catalog.link

    def slowed(self, name, field_name="cluster.link"):
        link = original(self, name, field_name)
        return dataclasses.replace(
            link, bandwidth_Bps=link.bandwidth_Bps / factor, latency_s=link.latency_s * factor,
            software_latency_s=link.software_latency_s * factor,
            per_flow_bandwidth_Bps=None if link.per_flow_bandwidth_Bps is None else link.per_flow_bandwidth_Bps / factor,
            tcp_window_bytes=None if link.tcp_window_bytes is None else link.tcp_window_bytes / factor)

    monkeypatch.setattr(Catalog, "link", slowed)


def test_slowed_network_fails(suite, tmp_path, monkeypatch, capsys):
    slow_the_network(monkeypatch, 1.3)
    capsys.readouterr()
    assert main(["regress", "--suite", str(suite), "--baselines", str(tmp_path / "baselines")]) == 1
    out = capsys.readouterr().out
    checks = run_suite(suite, tmp_path / "baselines")
    failed = {(c.scenario, c.label) for c in checks if c.status == "FAIL"}
    assert ("net", "gpus=32 collective=ring") in failed and ("tiny", "gpus=2") in failed
    assert all(c.status == "OK" for c in checks if c.label.startswith("gpus=1 ") or c.label == "gpus=1")
    assert "FAILED" in out and "--update" in out


def test_update_rewrites_baselines_on_purpose(suite, tmp_path, monkeypatch):
    slow_the_network(monkeypatch, 2.0)
    assert main(["regress", "--suite", str(suite), "--baselines", str(tmp_path / "baselines")]) == 1
    assert main(["regress", "--suite", str(suite), "--baselines", str(tmp_path / "baselines"), "--update"]) == 0
    assert main(["regress", "--suite", str(suite), "--baselines", str(tmp_path / "baselines")]) == 0


def test_missing_baseline_and_vanished_points_fail(suite, tmp_path):
    (tmp_path / "baselines" / "tiny.csv").unlink()
    checks = run_suite(suite, tmp_path / "baselines")
    assert {c.status for c in checks if c.scenario == "tiny"} == {"NEW"}
    row = {"point_id": "p", "label": "x", "world_size": 8, "scaling_efficiency": 0.9, "iteration_time_s": 1.0}
    gone = compare("s", [], {"p": {k: str(v) for k, v in row.items()}}, {"efficiency_pp": 1, "iteration_time_pct": 5})
    assert [c.status for c in gone] == ["GONE"]


@pytest.mark.parametrize(("now_eff", "now_time", "tol_pp", "status"), [
    (0.905, 1.0, 1.0, "OK"),     # +0.5 pp
    (0.915, 1.0, 1.0, "FAIL"),   # +1.5 pp: better is also a change to review
    (0.905, 1.0, 0.4, "FAIL"),   # a scenario's tighter tolerance
    (0.90, 1.06, 1.0, "FAIL"),   # iteration time +6 % > 5 %
    (0.90, 1.04, 1.0, "OK"),
])
def test_tolerances(now_eff, now_time, tol_pp, status):
    base = {"p": {"point_id": "p", "label": "x", "world_size": "8", "scaling_efficiency": "0.9", "iteration_time_s": "1.0"}}
    now = [{"point_id": "p", "label": "x", "world_size": 8, "scaling_efficiency": now_eff, "iteration_time_s": now_time}]
    (check,) = compare("s", now, base, {"efficiency_pp": tol_pp, "iteration_time_pct": 5.0})
    assert check.status == status


def test_committed_suite_passes_against_committed_baselines(capsys):
    """The CI check itself: the repository's model against experiments/baselines/."""
    root = Path(__file__).resolve().parents[1]
    checks = run_suite(root / "experiments" / "regress.yaml", root / "experiments" / "baselines")
    assert checks and all(c.status == "OK" for c in checks), [c for c in checks if c.failed][:3]


def test_regress_outside_the_repository_compares_with_the_package_baselines(tmp_path):
    """Run from any directory, the check finds the baselines installed with the package (it used
    to look for ./results/baselines and report every point NEW)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "scalebench", "regress", "--quiet"], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("scalebench regress: passed (")
    assert "NEW" not in out.stdout and not list(tmp_path.iterdir())


def test_update_writes_the_checkouts_baselines_and_refuses_an_installed_package(tmp_path, monkeypatch):
    import experiments
    from scalebench.commands.regress import package_baselines

    root = Path(__file__).resolve().parents[1]
    assert package_baselines(update=True) == root / "experiments" / "baselines"  # a source checkout
    installed = tmp_path / "site-packages" / "experiments"
    installed.mkdir(parents=True)
    monkeypatch.setattr(experiments, "__file__", str(installed / "__init__.py"))
    assert package_baselines(update=False) == installed / "baselines"
    with pytest.raises(ConfigError, match=r"^--update: .* a source checkout's baselines \(this package is installed"):
        package_baselines(update=True)


def test_claims_table_from_results_and_readme_update(tmp_path):
    table = claims_markdown(tmp_path)  # nothing run yet
    assert table.count("not run yet") == len(CLAIMS)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold\n{END}\ntail\n")
    update_readme(readme, table)
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith(f"{END}\ntail\n") and "old" not in text
    (tmp_path / "plain.md").write_text("no markers")
    with pytest.raises(ConfigError):
        update_readme(tmp_path / "plain.md", table)


def test_claims_table_reads_the_figures_from_results(tmp_path):
    """A chainermn_128 result with a known efficiency shows up with its difference from 85 %."""
    import pandas as pd

    rows = []
    for link, coll, eff in (("ib_fdr", "hierarchical", 0.80), ("tcp_10gbe", "hierarchical", 0.5), ("tcp_10gbe", "ring", 0.4)):
        rows.append({"source": "sim", "world_size": 128, "inter_link": link, "collective": coll,
                     "scaling_efficiency": eff, "speedup": 128 * eff, "throughput_samples_per_s": 1.0})
    (tmp_path / "chainermn_128").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "chainermn_128" / "results.csv", index=False)
    table = claims_markdown(tmp_path)
    assert "80 % (102x) at 128 GPUs, IB FDR" in table and "-5 pp vs the claim" in table
    assert "50 % hierarchical / 40 % ring" in table and "+5 pp vs the claim" in table
