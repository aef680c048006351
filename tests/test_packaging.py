"""Packaging for the machines users have: the extras and the Python version in pyproject.toml, a
sweep on a local Dask cluster, files with the user's umask, strict JSON, and one line naming the
torch extra where torch is missing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest

from experiments.config import experiment_from_dict
from experiments.runner import run_experiment
from sim.fileio import atomic_write_bytes, atomic_write_json, atomic_write_text, strict_json

ROOT = Path(__file__).resolve().parents[1]
SWEEP = {"name": "dask_sweep", "workload": {"model": "resnet50"},
         "cluster": {"gpus_per_node": 4, "gpu": "v100", "intra_link": "nvlink2"},
         "sweep": {"cluster.gpus": [1, 2, 4, 8, 16, 32], "cluster.inter_link": ["tcp_10gbe", "ib_edr"]}}


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pyproject_extras_and_python():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    project = _pyproject()["project"]
    assert project["requires-python"] == ">=3.11"
    assert Version("3.11") in SpecifierSet(project["requires-python"]) and sys.version_info >= (3, 11)
    extras = project["optional-dependencies"]
    (torch_req,) = extras["real"]
    spec = SpecifierSet(torch_req.removeprefix("torch"))
    assert Version("2.13.0") in spec and Version("2.5.1+cu124") in spec  # the CPU build here and a CUDA build
    assert "==" not in torch_req
    assert {r.split(">")[0] for r in extras["dask"]} == {"dask", "distributed"} and extras["ray"][0].startswith("ray")
    assert _pyproject()["tool"]["ruff"]["target-version"] == "py311"
    installed = metadata.version("torch") if _has("torch") else None
    if installed:
        assert Version(installed) in spec


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_a_sweep_runs_on_a_local_dask_cluster(tmp_path):
    pytest.importorskip("distributed")
    import tempfile

    exp = experiment_from_dict(SWEEP)
    scratch_before = set(Path(tempfile.gettempdir()).glob("scalebench-dask-*"))
    dask_sum = run_experiment(exp, tmp_path / "dask", jobs=2, executor="dask", progress=False, log=lambda _: None)
    assert set(Path(tempfile.gettempdir()).glob("scalebench-dask-*")) == scratch_before  # its scratch removed
    proc_sum = run_experiment(exp, tmp_path / "proc", jobs=1, executor="process", progress=False, log=lambda _: None)
    assert dask_sum.computed == proc_sum.computed == 12
    dask_rows = pd.read_csv(tmp_path / "dask" / "results.csv").sort_values("point_id").reset_index(drop=True)
    proc_rows = pd.read_csv(tmp_path / "proc" / "results.csv").sort_values("point_id").reset_index(drop=True)
    assert list(dask_rows["point_id"]) == list(proc_rows["point_id"])
    assert list(dask_rows["iteration_time_s"]) == list(proc_rows["iteration_time_s"])  # deterministic, wherever it ran


@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_get_the_users_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        for path, write in ((tmp_path / "a.txt", lambda p: atomic_write_text(p, "x")),
                            (tmp_path / "b.json", lambda p: atomic_write_json(p, {"a": 1})),
                            (tmp_path / "c.png", lambda p: atomic_write_bytes(p, b"\x89PNG"))):
            write(path)
            assert stat.S_IMODE(path.stat().st_mode) == mode, path
    finally:
        os.umask(old)


def test_results_of_a_run_are_readable_by_the_group(tmp_path):
    old = os.umask(0o022)
    try:
        exp = experiment_from_dict({**SWEEP, "sweep": {"cluster.gpus": [1, 4]}})
        run_experiment(exp, tmp_path / "r", jobs=1, progress=False, log=lambda _: None)
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "r").rglob("*") if p.is_file()]
    assert files and all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in files)


def _strict_loads(text: str):
    def refuse(token):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(text, parse_constant=refuse)


def test_json_is_strict_everywhere_it_is_written(tmp_path):
    data = {"a": float("nan"), "b": [1.0, float("inf"), -float("inf")], "c": {"d": 2.5}, "e": "x"}
    assert strict_json(data) == {"a": None, "b": [1.0, None, None], "c": {"d": 2.5}, "e": "x"}
    atomic_write_json(tmp_path / "x.json", data)
    assert _strict_loads((tmp_path / "x.json").read_text())["a"] is None
    from scalebench.commands.common import format_rows

    _strict_loads(format_rows([{"v": float("nan")}], "json"))


def test_a_run_of_measured_shaped_rows_writes_strict_points(tmp_path):
    """Rows with NaN (a column the backend cannot measure) become null in points/*.json."""
    exp = experiment_from_dict({**SWEEP, "workload": {"model": "mlp"}, "cluster": {"gpu": "cpu", "intra_link": "tcp_10gbe"},
                                "sweep": {"cluster.gpus": [1, 2]}, "backend": "real"})

    def fake_measure(spec, **kwargs):
        from sim.config import scenario_columns, scenario_from_dict
        from sim.simulate import simulate

        scenario = scenario_from_dict(spec, extra_keys=("real",))
        return {**scenario_columns(scenario), **simulate(scenario).metrics(), "bytes_intra": float("nan")}

    run_experiment(exp, tmp_path / "m", jobs=1, progress=False, log=lambda _: None, measure=fake_measure)
    points = list((tmp_path / "m" / "points").glob("*.json"))
    assert len(points) == 2
    for path in points:
        assert _strict_loads(path.read_text())["row"]["bytes_intra"] is None
    _strict_loads((tmp_path / "m" / "meta.json").read_text())


@pytest.mark.parametrize("argv", [["real"], ["calibrate"], ["layers", "x.py:Net", "--input-shape", "1,2"],
                                  ["real", "--comm"], ["validate", "--quick"]])
def test_without_torch_the_commands_that_need_it_say_which_extra(argv):
    code = ("import sys; sys.modules['torch'] = None\n"
            "from scalebench.cli import main\n"
            f"sys.exit(main({argv!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'scalebench[real]'" in lines[0], proc.stderr


def test_the_devset_suite_needs_no_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from scalebench.cli import main\n"
            "sys.exit(main(['validate', '--suite', 'devset']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr  # its verdict, not a missing torch
    assert "scalebench[real]" not in proc.stderr and "public measurements of real GPU clusters" in proc.stdout


def _readme_first_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readmes_test_command_is_what_ci_runs_with_a_pinned_cpu_torch():
    """The first screen keeps its two set-up commands; the second, the tests, is a line of
    .ci/run as written, and what it installs pins torch's CPU build (an unpinned or ranged torch
    took torch 2.14.1 with CUDA wheels, a 5.7 GB venv, on a CPU machine)."""
    setup, tests = _readme_first_block()
    assert setup.startswith("pip install -e . && scalebench run")
    assert tests.endswith("&& python -m pytest")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert tests in ci
    requirement_file = tests.split("-r ", 1)[1].split()[0]
    lines = [line.strip() for line in (ROOT / requirement_file).read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert "torch==2.13.0" in lines and "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert any(line.startswith("-e .[") and "test" in line and "real" in line for line in lines)


def test_the_wheel_carries_its_data_metadata_and_license():
    """The wheel left out validation/devset/*.csv (`validate --suite devset` failed after a normal
    install; CI now installs the wheel and runs it from outside the checkout). Every data file
    the packages read must match a package-data pattern; the metadata names the project's
    authors, addresses, classifiers and its Apache-2.0 license file."""
    from fnmatch import fnmatch

    project = _pyproject()["project"]
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]
    data_files = [*(ROOT / "validation" / "devset").iterdir(), *(ROOT / "sim" / "data").rglob("*.yaml"),
                  *(ROOT / "sim" / "data" / "workloads").iterdir(), *(ROOT / "experiments").glob("*.yaml"),
                  *(ROOT / "experiments" / "baselines").glob("*.csv")]
    for path in data_files:
        package, relative = path.relative_to(ROOT).parts[0], path.relative_to(ROOT / path.relative_to(ROOT).parts[0])
        assert any(fnmatch(relative.as_posix(), pattern) for pattern in package_data.get(package, [])), path
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()
    assert project["authors"] and {"Homepage", "Source", "Issues"} <= set(project["urls"])
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639: the expression alone
