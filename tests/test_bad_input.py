"""Bad input, command by command: exit status 2, exactly one line on stderr naming the field,
no traceback, and nothing written (issue 20).

Every case runs ``scalebench.cli.main`` in-process from an empty directory holding only the
case's input files; afterwards that directory must hold exactly those files. ``ISSUE`` cases are
the reproductions of issue 20 (each failed on the code before it: a traceback, a hang, or an
answer with exit status 0); ``MORE`` are further kinds found by trying every field with
nan/inf/negative/zero/huge/string/list values, unknown names and unusable paths.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from scalebench.cli import main
from tests.conftest import MINI_EXPERIMENT

BINARY = bytes(range(128, 256)) * 8  # not UTF-8: a binary file given as a config
RESNET16 = "workload: resnet50\ncluster: {gpus: 16, gpus_per_node: 8}\n"
GPU_G = "{peak_tflops: {fp32: 10}, memory_bandwidth_GBps: 900, memory_GiB: 16}"
LINK_X = "cluster: {gpus: 16, gpus_per_node: 8, inter_link: x}\n"
SYS = Path("/sys/kernel")
"""A directory nobody can write into, root included (sysfs): the read-only output location."""


def _real(tmp_path: Path, results: Path) -> None:
    pytest.importorskip("torch")


def _sys(tmp_path: Path, results: Path) -> None:
    if not SYS.is_dir():
        pytest.skip("no /sys/kernel: the read-only location these cases write into")


def _results(tmp_path: Path, results: Path) -> None:
    """A finished experiment's directory, results/mini, in the case's directory."""
    shutil.copytree(results, tmp_path / "results" / "mini")


def _results_plots_read_only(tmp_path: Path, results: Path) -> None:
    _sys(tmp_path, results)
    _results(tmp_path, results)
    shutil.rmtree(tmp_path / "results" / "mini" / "plots", ignore_errors=True)
    (tmp_path / "results" / "mini" / "plots").symlink_to(SYS)


def _first_point(results: Path) -> str:
    return sorted(p.name for p in (results / "points").glob("*.json"))[0]


# id: (files, argv, field named in the one line, precondition)
ISSUE = {
    "bucket-mib-inf": ({}, ["simulate", "--bucket-mib", "inf"], "strategy.bucket_mib", None),
    "iterations-1e8": ({}, ["simulate", "--iterations", "100000000"], "--iterations", None),
    "binary-config-simulate": ({"c.yaml": BINARY}, ["simulate", "c.yaml"], "config: got 'c.yaml'", None),
    "binary-config-run": ({"c.yaml": BINARY}, ["run", "c.yaml"], "config: got 'c.yaml'", None),
    "binary-config-real": ({"c.yaml": BINARY}, ["real", "c.yaml"], "config: got 'c.yaml'", _real),
    "latency-inf": ({"c.yaml": f"workload: resnet50\ncatalog: {{links: {{x: {{bandwidth_Gbps: 10, latency_us: .inf}}}}}}\n"
                                f"{LINK_X}"}, ["simulate", "c.yaml"], "catalog.links.x.latency_us", None),
    "flops-inf": ({"c.yaml": "workload: {layers: [{fwd_flops: .inf, param_count: 10}]}\n"},
                  ["simulate", "c.yaml"], "workload.layers[0].fwd_flops", None),
    "slow-factor-inf": ({"c.yaml": RESNET16 + "heterogeneity: {slow_nodes: 1, slow_factor: .inf}\n"},
                        ["simulate", "c.yaml", "--iterations", "3"], "heterogeneity.slow_factor", None),
    "layer-time-negative": ({"c.yaml": "workload: {layers: [{fwd_flops: 1e9, fwd_time_s: -1, bwd_time_s: 1}]}\n"},
                            ["simulate", "c.yaml"], "workload.layers[0].fwd_time_s", None),
    "layer-time-text": ({"c.yaml": "workload: {layers: [{fwd_flops: 1e9, fwd_time_s: abc, bwd_time_s: 1}]}\n"},
                        ["simulate", "c.yaml"], "workload.layers[0].fwd_time_s", None),
    "cluster-not-mapping": ({"c.yaml": "workload: resnet50\ncluster: 5\n"}, ["simulate", "c.yaml", "--gpus", "8"],
                            "cluster: got 5", None),
    "strategy-not-mapping": ({"c.yaml": "workload: resnet50\nstrategy: [1, 2]\n"},
                             ["simulate", "c.yaml", "--collective", "tree"], "strategy: got [1, 2]", None),
    "cluster-not-mapping-swept": ({"c.yaml": "name: x\nworkload: mlp\ncluster: 5\nsweep: {cluster.gpus: [1, 2]}\n"},
                                  ["run", "c.yaml", "--dry-run"], "cluster: got 5", None),
    "run-results-file": ({"afile": "x"}, ["run", "--results", "afile"], "--results", None),
    "run-results-read-only": ({}, ["run", "--results", str(SYS / "scalebench")], "--results", _sys),
    "real-out-under-file": ({"afile": "x"}, ["real", "--out", "afile/row.csv"], "--out", _real),
    "jitter-cv-inf": ({}, ["simulate", "--jitter-cv", "inf", "--iterations", "3"], "heterogeneity.jitter_cv", None),
    "fwd-time-only": ({"c.yaml": "workload: {layers: [{fwd_flops: 1e9, param_count: 10, fwd_time_s: 5}]}\n"},
                      ["simulate", "c.yaml"], "workload.layers[0].bwd_time_s", None),
    "duplicate-key": ({"c.yaml": "workload: resnet50\ncluster:\n  gpus: 8\n  gpus: 16\n"}, ["simulate", "c.yaml"],
                      "c.yaml line 4: got \"duplicate key 'gpus'\"", None),
    "trace-with-iterations": ({}, ["simulate", "--iterations", "3", "--trace", "t.json"], "--trace", None),
    "real-unknown-key-dry-run": ({"c.yaml": "name: r\nbackend: real\nworkload: mlp\ncluster: {gpus: 2}\nreal: {bogus: 1}\n"},
                                 ["run", "c.yaml", "--dry-run"], "real.bogus", _real),
    # real takes only the flags it can measure (issue 21): the labels can come only from a config, and are refused there
    "real-gpu-h100-over-ndr": ({}, ["real", "--gpu", "h100", "--inter-link", "ib_ndr"], "unrecognized arguments: --gpu", _real),
    "real-inter-link-ndr": ({"c.yaml": "workload: small_cnn\ncluster: {gpus: 2, gpu: h100, inter_link: ib_ndr}\n"},
                            ["real", "c.yaml"], "cluster.gpu", _real),
    "gpus-1e12-flag": ({}, ["simulate", "--gpus", "1000000000000"], "cluster.gpus", None),
    "bandwidth-inf": ({"c.yaml": f"workload: resnet50\ncatalog: {{links: {{x: {{bandwidth_Gbps: .inf, latency_us: 1}}}}}}\n"
                                 f"{LINK_X}"}, ["simulate", "c.yaml"], "catalog.links.x.bandwidth_Gbps", None),
    "tflops-inf": ({"c.yaml": "workload: resnet50\ncluster: {gpu: g}\ncatalog: {gpus: {g: {peak_tflops: {fp32: .inf}, "
                              "memory_bandwidth_GBps: 900, memory_GiB: 16}}}\n"},
                   ["simulate", "c.yaml"], "catalog.gpus.g.peak_tflops.fp32", None),
}


def _yaml(body: str) -> dict[str, str]:
    return {"c.yaml": body}


MORE = {
    # issue 21's commands
    "layers-no-input-shape": ({"m.py": "from torch import nn\nNet = lambda: nn.Linear(2, 2)\n"}, ["layers", "m.py:Net"],
                              "--input-shape", _real),
    "layers-bad-target": ({}, ["layers", "m.py", "--input-shape", "2,2"], "TARGET", _real),
    "list-unknown-kind": ({}, ["list", "nics"], "invalid choice: 'nics'", None),
    "list-catalog-with-models": ({}, ["list", "models", "--catalog", "x.yaml"], "--catalog", None),
    "schema-unknown-kind": ({}, ["schema", "sweep"], "invalid choice: 'sweep'", None),
    # simulate: numbers
    "batch-size-zero": ({}, ["simulate", "--batch-size", "0"], "workload.batch_size", None),
    "gpus-1e12-yaml": ({"c.yaml": "workload: mlp\ncluster: {gpus: 1e12}\n"}, ["simulate", "c.yaml"], "cluster.gpus", None),
    "gpus-per-node-zero": ({}, ["simulate", "--gpus-per-node", "0"], "cluster.gpus_per_node", None),
    "bucket-mib-nan": ({}, ["simulate", "--bucket-mib", "nan"], "strategy.bucket_mib", None),
    "bucket-mib-negative": ({}, ["simulate", "--bucket-mib", "-1"], "strategy.bucket_mib", None),
    "jitter-cv-percent": ({}, ["simulate", "--jitter-cv", "50", "--iterations", "3"], "heterogeneity.jitter_cv", None),
    "jitter-cv-one-iteration": ({}, ["simulate", "--jitter-cv", "0.3"], "heterogeneity", None),
    "ps-servers-1e9": ({}, ["simulate", "--collective", "ps", "--ps-servers", "1000000000"], "strategy.ps_servers", None),
    "micro-batches-not-divisor": ({}, ["simulate", "--micro-batches", "7"], "strategy.micro_batches", None),
    "iterations-zero": ({}, ["simulate", "--iterations", "0"], "--iterations", None),
    "seed-negative": ({}, ["simulate", "--seed", "-1"], "simulation.seed", None),
    # simulate: names
    "unknown-model": ({}, ["simulate", "--model", "zz"], "workload.model", None),
    "unknown-gpu": ({}, ["simulate", "--gpu", "zz"], "cluster.gpu", None),
    "unknown-collective": ({}, ["simulate", "--collective", "zz"], "strategy.collective", None),
    "unknown-precision": ({}, ["simulate", "--precision", "fp7"], "strategy.precision", None),
    "unknown-codec-path": ({}, ["simulate", "--codec", "fp16", "--codec-path", "zz"], "strategy.codec_path", None),
    # files given as input
    "config-missing": ({}, ["simulate", "nope.yaml"], "config: got 'nope.yaml'", None),
    "config-directory": ({"d/x": "x"}, ["simulate", "d"], "config: got 'd'", None),
    "config-empty": ({"c.yaml": ""}, ["simulate", "c.yaml"], "c.yaml: got 'an empty file'", None),
    "config-list": ({"c.yaml": "[1, 2]\n"}, ["simulate", "c.yaml"], "c.yaml: got 'list'", None),
    "config-dev-zero": ({}, ["simulate", "/dev/zero"], "config: got '/dev/zero'", None),
    "config-syntax": ({"c.yaml": "a: [1, 2\n"}, ["simulate", "c.yaml"], "c.yaml line 2", None),
    "catalog-missing": ({}, ["simulate", "--catalog", "nope.yaml"], "catalog: got 'nope.yaml'", None),
    "catalog-binary": ({"k.yaml": BINARY}, ["simulate", "--catalog", "k.yaml"], "catalog: got 'k.yaml'", None),
    "catalog-list": ({"k.yaml": "[1]\n"}, ["simulate", "--catalog", "k.yaml"], "k.yaml: got [1]", None),
    # YAML sections
    "workload-model-list": (_yaml("workload: {model: [1]}\n"), ["simulate", "c.yaml"], "workload.model", None),
    "workload-batch-bool": (_yaml("workload: {model: mlp, batch_size: true}\n"), ["simulate", "c.yaml"],
                            "workload.batch_size", None),
    "workload-layers-empty": (_yaml("workload: {layers: []}\n"), ["simulate", "c.yaml"], "workload.layers", None),
    "workload-layer-activations-nan": (_yaml("workload: {layers: [{fwd_flops: 1e9, activation_elems: .nan}]}\n"),
                                       ["simulate", "c.yaml"], "workload.layers[0].activation_elems", None),
    "workload-no-work": (_yaml(f"workload: {{layers: [{{fwd_flops: 0}}]}}\ncatalog: {{gpus: {{g: {GPU_G}}}}}\n"
                               "cluster: {gpu: g}\n"), ["simulate", "c.yaml"], "workload.layers", None),
    "workload-flops-overflow": (_yaml("workload: {layers: [{fwd_flops: 1e307, bwd_flops: 1e307}], batch_size: 32}\n"
                                      "cluster: {gpus: 8}\nsimulation: {check_memory: false}\n"),
                                ["simulate", "c.yaml"], "workload layer layer0", None),
    "cluster-nodes-mismatch": (_yaml("workload: mlp\ncluster: {gpus: 8, nodes: 3, gpus_per_node: 2}\n"),
                               ["simulate", "c.yaml"], "cluster.gpus", None),
    "cluster-nodes-huge": (_yaml("workload: mlp\ncluster: {nodes: 1000000, gpus_per_node: 8}\n"),
                           ["simulate", "c.yaml"], "cluster.nodes", None),
    "cluster-oversubscription-inf": (_yaml("workload: mlp\ncluster: {oversubscription: .inf}\n"),
                                     ["simulate", "c.yaml"], "cluster.oversubscription", None),
    "cluster-gpu-list": (_yaml("workload: mlp\ncluster: {gpu: [a]}\n"), ["simulate", "c.yaml"], "cluster.gpu", None),
    "strategy-overlap-text": (_yaml("workload: mlp\nstrategy: {overlap: 'yes'}\n"), ["simulate", "c.yaml"],
                              "strategy.overlap", None),
    "strategy-first-bucket-inf": (_yaml("workload: mlp\nstrategy: {first_bucket_mib: .inf}\n"), ["simulate", "c.yaml"],
                                  "strategy.first_bucket_mib", None),
    "strategy-overhead-inf": (_yaml("workload: mlp\nstrategy: {pipeline_overhead_s: .inf}\n"), ["simulate", "c.yaml"],
                              "strategy.pipeline_overhead_s", None),
    "simulation-check-memory-text": (_yaml("workload: mlp\nsimulation: {check_memory: 'no'}\n"), ["simulate", "c.yaml"],
                                     "simulation.check_memory", None),
    "catalog-gpus-list": (_yaml("workload: mlp\ncatalog: {gpus: [1]}\n"), ["simulate", "c.yaml"], "catalog.gpus", None),
    "catalog-memory-inf": (_yaml("workload: mlp\ncatalog: {gpus: {g: {peak_tflops: {fp32: 10}, memory_bandwidth_GBps: 900, "
                                 "memory_GiB: .inf}}}\n"), ["simulate", "c.yaml"], "catalog.gpus.g.memory_GiB", None),
    "catalog-software-latency-inf": (_yaml("workload: mlp\ncatalog: {links: {x: {bandwidth_Gbps: 10, latency_us: 1, "
                                           "software_latency_us: .inf}}}\n"), ["simulate", "c.yaml"],
                                     "catalog.links.x.software_latency_us", None),
    "heterogeneity-slow-factor-huge": (_yaml(RESNET16 + "heterogeneity: {slow_nodes: 1, slow_factor: 1e308}\n"),
                                       ["simulate", "c.yaml", "--iterations", "3"], "heterogeneity.slow_factor", None),
    "heterogeneity-mixed-list": (_yaml(RESNET16 + "heterogeneity: {mixed_gpus: [k80]}\n"),
                                 ["simulate", "c.yaml", "--iterations", "3"], "heterogeneity.mixed_gpus", None),
    "faults-restart-nan": (_yaml(RESNET16 + "faults: {restart_s: .nan}\n"), ["simulate", "c.yaml", "--iterations", "3"],
                           "faults.restart_s", None),
    "faults-one-iteration": (_yaml(RESNET16 + "faults: {fail_rank: 1, fail_at_s: 1}\n"), ["simulate", "c.yaml"],
                             "faults", None),
    "detailed-tree": (_yaml("workload: mlp\ncluster: {gpus: 4}\nstrategy: {collective: tree}\n"
                            "simulation: {fidelity: detailed}\n"), ["simulate", "c.yaml"], "simulation.fidelity", None),
    "detailed-horovod-fusion": (_yaml("workload: mlp\ncluster: {gpus: 4}\nstrategy: {framework: horovod}\n"
                                      "simulation: {fidelity: detailed}\n"), ["simulate", "c.yaml"], "simulation.fidelity",
                                None),
    # output paths
    "trace-under-file": ({"afile": "x"}, ["simulate", "--trace", "afile/t.json"], "--trace", None),
    "trace-is-directory": ({"d/x": "x"}, ["simulate", "--trace", "d"], "--trace", None),
    "trace-read-only": ({}, ["simulate", "--trace", str(SYS / "t.json")], "--trace", _sys),
    # run: the experiment config
    "sweep-range-1e12": (_yaml("name: e\nworkload: mlp\nsweep: {cluster.gpus: {range: {start: 1, stop: 1e12}}}\n"),
                         ["run", "c.yaml", "--dry-run"], "sweep.cluster.gpus.range", None),
    "sweep-geometric-1e300": (_yaml("name: e\nworkload: mlp\nsweep: {cluster.gpus: {geometric: {start: 1, stop: 1e300, "
                                    "factor: 1.0000001}}}\n"), ["run", "c.yaml", "--dry-run"],
                              "sweep.cluster.gpus.geometric", None),
    "sweep-geometric-inf": (_yaml("name: e\nworkload: mlp\nsweep: {cluster.gpus: {geometric: {start: 1, stop: .inf}}}\n"),
                            ["run", "c.yaml", "--dry-run"], "sweep.cluster.gpus.geometric.stop", None),
    "experiment-iterations-inf": (_yaml("name: e\nworkload: mlp\niterations: .inf\n"), ["run", "c.yaml", "--dry-run"],
                                  "iterations", None),
    "experiment-heterogeneity-one-iteration": (_yaml("name: e\nworkload: mlp\nheterogeneity: {jitter_cv: 0.3}\n"),
                                               ["run", "c.yaml", "--dry-run"], "heterogeneity", None),
    "experiment-real-link": (_yaml("name: e\nbackend: real\nworkload: mlp\ncluster: {gpus: 2}\nreal: {link: zz}\n"),
                             ["run", "c.yaml", "--dry-run"], "real.link", _real),
    "experiment-real-topology": (_yaml("name: e\nbackend: real\nworkload: mlp\ncluster: {gpus: 2}\n"
                                       "real: {topology: zz}\n"), ["run", "c.yaml", "--dry-run"], "real.topology", _real),
    "run-jobs-zero": ({}, ["run", "--jobs", "0", "--dry-run"], "--jobs", None),
    # bench
    "bench-collective": ({}, ["bench", "--collective", "zz"], "--collective", None),
    "bench-gpus-per-node-zero": ({}, ["bench", "--gpus-per-node", "0"], "--gpus-per-node", None),
    "bench-async-iterations-huge": ({}, ["bench", "--gpus", "64", "--async-iterations", "100000000"],
                                    "--async-iterations", None),
    # regress
    "regress-suite-item": ({"s.yaml": "scenarios: [1]\n"}, ["regress", "--suite", "s.yaml"], "scenarios[0]", None),
    "regress-update-under-file": ({"afile": "x"}, ["regress", "--update", "--baselines", "afile/b"], "--baselines", None),
    "regress-baseline-text": ({"s.yaml": "scenarios: [{name: m, workload: mlp}]\n",
                               "b/m.csv": "point_id,label,world_size,scaling_efficiency,iteration_time_s\nx,m,1,abc,1\n"},
                              ["regress", "--suite", "s.yaml", "--baselines", "b"], "b/m.csv line 2 scaling_efficiency",
                              None),
    # calibrate and validate: refused before measuring
    "calibrate-out-under-file": ({"afile": "x"}, ["calibrate", "--out", "afile/c"], "--out", _real),
    "calibrate-max-bytes-huge": ({}, ["calibrate", "--max-bytes", "100000000000"], "--max-bytes", _real),
    "calibrate-threads-zero": ({}, ["calibrate", "--threads", "0"], "--threads", _real),
    "validate-out-under-file": ({"afile": "x"}, ["validate", "--quick", "--out", "afile/v"], "--out", _real),
    "validate-config-empty": ({"v.yaml": ""}, ["validate", "--config", "v.yaml"], "v.yaml: got 'an empty file'", _real),
    # real
    "real-timeout-inf": ({}, ["real", "--timeout", "inf"], "timeout_s", _real),
    "real-lr-nan": ({}, ["real", "--lr", "nan"], "real.lr", _real),
    "real-out-suffix": ({}, ["real", "--out", "row.txt"], "--out", _real),
    "real-comm-max-bytes-huge": ({}, ["real", "--comm", "--max-bytes", "100000000000"], "--max-bytes", _real),
    "real-bench-out-csv": ({}, ["real", "--bench", "--out", "b.csv"], "--out", _real),
    "real-nccl-on-cpu": ({}, ["real", "--backend", "nccl", "--device", "cpu"], "real.device", _real),
    "real-comm-profile": ({}, ["real", "--comm", "--profile", "t.json"], "--profile", _real),
    # collective (predicted nccl-tests tables) and the strategy keys of the collective libraries
    "collective-maxbytes-1e300": ({}, ["collective", "-e", "1e300"], "--maxbytes", None),
    "collective-unknown-op": ({}, ["collective", "--op", "zz"], "--op", None),
    # explain: the measurement and the variability it explains with
    "explain-measured-negative": ({}, ["explain", "--measured-iteration-s", "-0.5"], "--measured-iteration-s", None),
    "explain-both-measurements": ({}, ["explain", "--measured-iteration-s", "1", "--measured-samples-per-s", "10"],
                                  "--measured-iteration-s", None),
    "explain-gpu-cv-percent": ({}, ["explain", "--gpu-cv", "15"], "variability.gpu_cv", None),
    "variability-not-a-mapping": ({"c.yaml": "workload: mlp\nvariability: off\n"}, ["simulate", "c.yaml"], "variability",
                                  None),
    "collective-idle-nan": ({}, ["collective", "--idle-ms", "nan"], "--idle-ms", None),
    "strategy-framework-list": (_yaml("workload: mlp\nstrategy: {framework: [1]}\n"), ["simulate", "c.yaml"],
                                "strategy.framework", None),
    "strategy-fusion-inf": (_yaml("workload: mlp\nstrategy: {fusion_mib: .inf}\n"), ["simulate", "c.yaml"],
                            "strategy.fusion_mib", None),
    "backend-flag-strategy-not-mapping": (_yaml("workload: mlp\nstrategy: fast\n"),
                                          ["simulate", "c.yaml", "--backend", "gloo"], "strategy: got 'fast'", None),
    "validate-devset-out-ignored": ({}, ["validate", "--suite", "devset", "--out", "v"], "--out", None),
    # fabrics (issue 23): one line naming the field, nothing written
    "fabric-cannot-hold": ({}, ["simulate", "--gpus", "1024", "--gpus-per-node", "1", "--fidelity", "detailed",
                                "--fabric", "fat_tree"], "cluster.topology.radix", None),
    "fabric-radix-does-not-tile": (_yaml(RESNET16.replace("}", ", topology: {kind: fat_tree, radix: 8, "
                                                               "oversubscription: 2}}")), ["simulate", "c.yaml"],
                                   "cluster.topology.radix", None),
    "fabric-unknown-switch": ({"f.yaml": "switches: [{name: a}, {name: b}]\ncables: [{a: a, b: c, link: ib_hdr}]\n"
                                         "hosts: [{switch: a, count: 4}]\n"},
                              ["simulate", "--gpus", "2", "--gpus-per-node", "1", "--fabric", "f.yaml"],
                              "f.yaml.cables[0].b", None),
    "fabric-disconnected": ({"f.yaml": "switches: [{name: a}, {name: b}]\ncables: []\nhosts: [{switch: a, count: 4}]\n"},
                            ["simulate", "--gpus", "2", "--gpus-per-node", "1", "--fabric", "f.yaml"], "f.yaml.cables",
                            None),
    "fabric-placement-repeated": (_yaml("workload: mlp\ncluster: {gpus: 2, gpus_per_node: 1, topology: fat_tree, "
                                        "placement: [3, 3]}\n"), ["simulate", "c.yaml"], "cluster.placement", None),
    "flow-engine-unknown": ({}, ["simulate", "--fidelity", "detailed", "--flow-engine", "zz"],
                            "simulation.flow_engine", None),
    "links-on-the-fast-path": ({}, ["simulate", "--links", "l.csv"], "--links", None),
    "bench-fabric-without-detailed": ({}, ["bench", "--fabric", "fat_tree"], "--fabric", None),
    "bench-pipeline-gpus-without-detailed": ({}, ["bench", "--pipeline-gpus", "0"], "--pipeline-gpus", None),
    "bench-pipeline-model-without-detailed": ({}, ["bench", "--pipeline-model", "gpt2_xl"], "--pipeline-model", None),
    "bench-pipeline-gpus-untiled": ({}, ["bench", "--fidelity", "detailed", "--gpus", "64", "--pipeline-gpus", "100"],
                                    "--pipeline-gpus", None),
    "bench-pipeline-model-unknown": ({}, ["bench", "--fidelity", "detailed", "--gpus", "64", "--pipeline-model", "zz"],
                                     "--pipeline-model", None),
    "bench-fabric-cannot-hold": ({}, ["bench", "--fidelity", "detailed", "--gpus", "4096", "--gpus-per-node", "1",
                                      "--fabric", "fat_tree"], "--fabric", None),
    "validate-simgrid-quick": ({}, ["validate", "--suite", "simgrid", "--quick"], "--quick", None),
    # report
    "report-claims-root-missing": ({}, ["report", "--claims", "--results-root", "nope"], "--results-root", None),
    "report-claims-readme-binary": ({"r.md": BINARY}, ["report", "--claims", "--readme", "r.md", "--results-root", "."],
                                    "--readme", None),
    # plan: options, contradictions, and nothing left to rank (which constraint removed the last)
    "plan-objective": ({}, ["plan", "--model", "resnet50", "--gpus", "8", "--objective", "fast"], "--objective", None),
    "plan-max-gpus-below-gpus": ({}, ["plan", "--model", "resnet50", "--gpus", "8", "--max-gpus", "4"], "--max-gpus", None),
    "plan-codec-unknown": ({}, ["plan", "--model", "resnet50", "--gpus", "8", "--codecs", "fp7"], "--codecs", None),
    "plan-batch-beside-global": ({}, ["plan", "--model", "resnet50", "--gpus", "8", "--batch-size", "32",
                                      "--global-batch", "256"], "--batch-size", None),
    "plan-config-binary": ({"c.yaml": BINARY}, ["plan", "c.yaml", "--model", "resnet50"], "config: got 'c.yaml'", None),
    "plan-nothing-fits": ({}, ["plan", "--model", "gpt2_xl", "--gpus", "1", "--gpu", "k80"], "memory per rank", None),
    "plan-global-batch-indivisible": ({}, ["plan", "--model", "small_transformer", "--gpus", "4", "--gpus-per-node", "4",
                                           "--global-batch", "6", "--max-tp", "1", "--max-pp", "1"], "--global-batch", None),
}


M = "results/mini/"
COLUMNLESS = "a,b\n1,2\n"
ISSUE_RESULTS = {  # plot and report on a damaged or read-only results directory (results/mini, from a real run)
    "plot-csv-empty": ({M + "results.csv": ""}, ["plot", M], "results.csv", _results),
    "report-csv-empty": ({M + "results.csv": ""}, ["report", M], "results.csv", _results),
    "plot-csv-binary": ({M + "results.csv": BINARY}, ["plot", M], "results.csv", _results),
    "plot-csv-columnless": ({M + "results.csv": COLUMNLESS}, ["plot", M], "results.csv", _results),
    "report-csv-columnless": ({M + "results.csv": COLUMNLESS}, ["report", M], "results.csv", _results),
    "plot-meta-empty": ({M + "meta.json": ""}, ["plot", M], "meta.json", _results),
    "report-meta-empty": ({M + "meta.json": ""}, ["report", M], "meta.json", _results),
    "plot-meta-list": ({M + "meta.json": "[1, 2]"}, ["plot", M], "meta.json", _results),
    "report-meta-no-name": ({M + "meta.json": "{}"}, ["report", M], "meta.json name", _results),
    "plot-plots-read-only": ({}, ["plot", M], "results", _results_plots_read_only),
    "report-out-read-only": ({}, ["report", M, "--out", str(SYS / "r.html")], "--out", _results),
}
ISSUE.update(ISSUE_RESULTS)
MORE.update({
    "report-out-directory": ({"d/x": "x"}, ["report", M, "--out", "d"], "--out", _results),
    "report-experiment-yaml-binary": ({M + "experiment.yaml": BINARY}, ["report", M], "experiment.yaml", _results),
    "plot-csv-header-only": ({}, ["plot", M], "results.csv: got 'no rows'", _results),
    "plot-csv-text-in-numbers": ({}, ["plot", M], "results.csv column iteration_time_s", _results),
    "plot-timeline-point-truncated": ({}, ["plot", M, "--timeline-point", "FIRST"], "points/", _results),
})


def _damage(case: str, tmp_path: Path) -> list[str]:
    """Cases whose damage depends on the finished run's own files."""
    mini = tmp_path / "results" / "mini"
    if case == "plot-csv-header-only":
        header = (mini / "results.csv").read_text().splitlines()[0]
        (mini / "results.csv").write_text(header + "\n")
    elif case == "plot-csv-text-in-numbers":
        import csv

        rows = list(csv.DictReader((mini / "results.csv").open()))
        rows[0]["iteration_time_s"] = "abc"
        with (mini / "results.csv").open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif case == "plot-timeline-point-truncated":
        point = mini / "points" / _first_point(mini)
        point.write_text(point.read_text()[:40])
        return [point.stem]
    return []


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else -1) for p in sorted(root.rglob("*"))}


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def check_one_line_error(tmp_path: Path, monkeypatch, capsys, files: dict, argv: list[str], field: str) -> str:
    """Run ``argv`` in ``tmp_path`` holding ``files``: exit 2, one stderr line naming ``field``,
    no traceback, the directory unchanged. Returns the line."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, files)
    before = _snapshot(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (code, out[-500:], err[-500:])
    assert len(lines) == 1, err
    assert field in lines[0], lines[0]
    assert lines[0].startswith(f"scalebench {argv[0]}: error: ")
    assert "Traceback" not in out + err
    assert _snapshot(tmp_path) == before, "something was written"
    return lines[0]


def _run_case(table: dict, case: str, tmp_path: Path, monkeypatch, capsys, mini_results: Path) -> None:
    files, argv, field, needs = table[case]
    if needs:
        needs(tmp_path, mini_results)
    ids = _damage(case, tmp_path)
    argv = [ids[0] if a == "FIRST" else a for a in argv]
    check_one_line_error(tmp_path, monkeypatch, capsys, files, argv, field)


@pytest.mark.parametrize("case", ISSUE, ids=list(ISSUE))
def test_issue_20_reproductions_are_one_line_errors(case, tmp_path, monkeypatch, capsys, mini_results):
    _run_case(ISSUE, case, tmp_path, monkeypatch, capsys, mini_results)


@pytest.mark.parametrize("case", MORE, ids=list(MORE))
def test_more_bad_input_is_one_line_errors(case, tmp_path, monkeypatch, capsys, mini_results):
    _run_case(MORE, case, tmp_path, monkeypatch, capsys, mini_results)


def test_the_more_cases_are_at_least_40_distinct_kinds_across_the_commands():
    """Each case is its own kind of bad input: no two expect the same error from the same command
    line and files (two cases may share a command whose results directory their fixture breaks
    differently), the error each expects is named (a field, a flag or a file), over at least 8
    of the subcommands."""
    kinds = [(tuple(argv), repr(sorted(files.items())), expected) for files, argv, expected, _ in MORE.values()]
    assert len(set(kinds)) == len(kinds) >= 40
    assert all(expected.strip() for _, _, expected in kinds)
    assert len({argv[0] for argv, _, _ in kinds}) >= 8


def test_real_parquet_without_pyarrow_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    import real.results

    monkeypatch.setattr(real.results, "_has_pyarrow", lambda: False)
    line = check_one_line_error(tmp_path, monkeypatch, capsys, {}, ["real", "--out", "row.parquet"], "--out")
    assert ".parquet needs pyarrow" in line


def test_every_subcommand_is_covered():
    from scalebench.cli import SUBCOMMANDS

    covered = {argv[0] for _, argv, _, _ in (*ISSUE.values(), *MORE.values())}
    assert covered == set(SUBCOMMANDS)


def _chmod_protects() -> bool:
    """Whether a directory of mode 555 stops this process from writing (not so for root with
    CAP_DAC_OVERRIDE; run as a user, or under ``capsh --drop=cap_dac_override``)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o555)
        try:
            Path(tmp, "probe").touch()
        except OSError:
            return True
        finally:
            os.chmod(tmp, 0o755)
    return False


@pytest.mark.skipif(not _chmod_protects(), reason="this process writes through chmod 555 (root)")
@pytest.mark.parametrize("command", ["run", "plot", "report"])
def test_read_only_results_directory(command, tmp_path, monkeypatch, capsys, mini_results):
    """As a user, not root: the results root (run), an experiment's plots (plot) or its directory
    (report) made read-only with chmod."""
    _results(tmp_path, mini_results)
    (tmp_path / "other.yaml").write_text(MINI_EXPERIMENT.replace("name: mini", "name: other"))
    target = {"run": tmp_path / "results", "plot": tmp_path / M / "plots", "report": tmp_path / M}[command]
    argv = {"run": ["run", "other.yaml"], "plot": ["plot", M], "report": ["report", M]}[command]
    target.chmod(0o555)
    try:
        check_one_line_error(tmp_path, monkeypatch, capsys, {}, argv, "results")
    finally:
        target.chmod(0o755)
