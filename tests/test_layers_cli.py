"""Your own model: `scalebench layers MODULE:CALLABLE` then `scalebench run` with layers_file, and
the one-line errors on the way."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from sim.errors import ConfigError
from sim.workload import read_layers_file, workload_from_dict

pytestmark = pytest.mark.torch

MODEL_PY = textwrap.dedent('''
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, padding=1)
            self.bn = nn.BatchNorm2d(16)
            self.pool = nn.AdaptiveAvgPool2d(4)
            self.fc = nn.Linear(16 * 4 * 4, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


    class TokenNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 32)
            self.out = nn.Linear(32, 100)

        def forward(self, idx):
            return self.out(self.emb(idx))


    def reads_values():
        class ReadsValues(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                return self.fc(x) if x.sum().item() > -1e9 else x
        return ReadsValues()


    def not_a_module():
        return 42


    class Reuse(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(self.fc(x))
''')

EXPERIMENT = textwrap.dedent('''
    name: my_net
    workload: {layers_file: layers.csv}
    cluster: {gpus_per_node: 4, gpu: v100, intra_link: nvlink2, inter_link: tcp_10gbe}
    sweep:
      cluster.gpus: [1, 2, 4, 8, 16]
''')


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scalebench", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "my_model.py").write_text(MODEL_PY)
    return tmp_path


def test_own_model_to_speedup_plot_in_two_commands(project):
    """The README's path: the table is the architecture's arithmetic, and the sweep runs on it."""
    first = cli("layers", "my_model.py:Net", "--input-shape", "8,3,32,32", "-o", "layers.csv", cwd=project)
    assert first.returncode == 0, first.stderr
    assert "layers_file: layers.csv" in first.stdout
    (project / "conf").mkdir()
    (project / "layers.csv").rename(project / "conf" / "layers.csv")  # relative to the config, not the cwd
    (project / "conf" / "exp.yaml").write_text(EXPERIMENT)
    second = cli("run", "conf/exp.yaml", "--results", "out", "--jobs", "1", "--no-progress", cwd=project)
    assert second.returncode == 0, second.stderr
    rows = pd.read_csv(project / "out" / "my_net" / "results.csv")
    assert list(rows["world_size"]) == [1, 2, 4, 8, 16] and set(rows["model"]) == {"Net"}
    assert set(rows["batch_size"]) == {8}  # the batch of --input-shape
    assert (project / "out" / "my_net" / "plots" / "speedup.png").stat().st_size > 10_000

    layers, meta = read_layers_file(project / "conf" / "layers.csv")
    assert [la.name for la in layers] == ["conv", "bn", "fc"]
    conv, bn, fc = layers
    assert conv.param_count == 3 * 16 * 9 + 16 and bn.param_count == 32 and fc.param_count == 256 * 10 + 10
    assert conv.fwd_flops == 2 * 32 * 32 * 16 * 27  # 2 x output pixels x channels x (3 x 3 x 3) MACs
    assert conv.bwd_flops == conv.fwd_flops  # the first layer: no input gradient
    assert fc.fwd_flops == 2 * 256 * 10 and fc.bwd_flops == 2 * fc.fwd_flops
    assert conv.activation_elems == 16 * 32 * 32
    assert meta == {"name": "Net", "batch_size": 8, "dtype": "fp32", "input_shape": [8, 3, 32, 32]}


def test_tokens_dtype_and_stdout(project):
    out = cli("layers", "my_model.py:TokenNet", "--input-shape", "4,16", "--tokens", "100", "--dtype", "bf16",
              cwd=project)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("# TokenNet: layer table") and "--dtype bf16 --tokens 100" in lines[0]
    meta = json.loads(next(line for line in lines if line.startswith("# meta: "))[len("# meta: "):])
    assert meta["dtype"] == "bf16" and meta["batch_size"] == 4
    rows = [line.split(",") for line in lines if not line.startswith("#")]
    assert rows[1][:3] == ["emb", "Embedding", "3200"] and int(rows[2][3]) == 2 * 16 * 32 * 100


@pytest.mark.parametrize("args,words", [
    (["nope.py:Net", "--input-shape", "2,3"], "does not"),
    (["my_model.py:Missing", "--input-shape", "2,3"], "it has: Net"),
    (["my_model.py:not_a_module", "--input-shape", "2,3"], "returned int"),
    (["my_model.py:Net"], "--input-shape"),
    (["my_model.py:Net", "--input-shape", "8,3,x"], "--input-shape"),
    (["my_model.py:Net", "--input-shape", "2,7"], "a forward and backward that run"),
    (["my_model.py:reads_values", "--input-shape", "2,4"], "--device cpu"),
    (["my_model.py:Reuse", "--input-shape", "2,4", "--device", "cpu"], "runs twice"),
    (["my_model.py", "--input-shape", "2,4"], "MODULE:CALLABLE"),
])
def test_bad_targets_are_one_line_errors(project, args, words, monkeypatch, capsys):
    from scalebench.cli import main

    monkeypatch.chdir(project)
    assert main(["layers", *args, "-o", "t.csv"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and captured.out == ""
    assert not (project / "t.csv").exists()


def test_a_model_that_reads_values_derives_on_cpu(project):
    proc = cli("layers", "my_model.py:reads_values", "--input-shape", "2,4", "--device", "cpu", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "\nfc,Linear,20,32,32,4\n" in proc.stdout


def test_layers_file_in_a_scenario_resolves_against_the_config_and_checks_its_batch(project):
    table = "# meta: {\"name\": \"t\", \"batch_size\": 4, \"times_batch_size\": 4}\n" \
            "layer,kind,param_count,fwd_flops,bwd_flops,activation_elems,fwd_time_s,bwd_time_s\n" \
            "a,Linear,10,100,200,5,0.001,0.002\n"
    (project / "t.csv").write_text(table)
    (project / "s.yaml").write_text("workload: {layers_file: t.csv}\ncluster: {gpus: 1}\n")
    proc = cli("simulate", str(project / "s.yaml"), "--format", "json", cwd=project.parent)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)[0]
    assert row["model"] == "t" and row["batch_size"] == 4
    assert row["forward_time_s"] == pytest.approx(0.001) and row["backward_time_s"] == pytest.approx(0.002)
    with pytest.raises(ConfigError, match="the batch at which"):
        workload_from_dict({"layers_file": str(project / "t.csv"), "batch_size": 8})
    with pytest.raises(ConfigError) as err:
        workload_from_dict({"layers_file": str(project / "none.csv")})
    assert err.value.field == "workload.layers_file"
