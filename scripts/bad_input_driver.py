"""Throw families of bad input at every scalebench command and flag what does not end well.

    python scripts/bad_input_driver.py                 # every family, 2 at a time; a summary and the findings
    python scripts/bad_input_driver.py -k simulate -j 1 --verbose
    python scripts/bad_input_driver.py --list          # the cases, run nothing

Every case runs ``python -m scalebench ...`` in a fresh directory of its own, under a time limit
(TIMEOUT_S, more for the commands that measure) and a memory limit (RLIMIT_AS, MEMORY_BYTES), and
is judged by what a user would see:

- ``one-line``: exit status 2 and one line on stderr, ``scalebench CMD: error: ...``, nothing written;
- ``failed``: exit status 1 with one line (a run that failed, a full device: the machine's refusal);
- ``accepted``: exit status 0: nonsense in, a number out, unless the case says the input is
  legitimate (``ok``: then exit 0 is right and anything else is a finding);
- ``multi-line``: an error of several lines; ``traceback``: a Python traceback or a death by signal;
- ``hang``: past the time limit; ``memory``: past the memory limit (MemoryError, or killed);
- ``wrote``: an error exit that left files behind (output paths are checked before any work).

Families (each a function below, a list of cases): numbers given to every numeric flag of every
command (zero, negative, NaN, infinity, huge, a fraction, text); unknown names to every name flag;
every path a command reads given as a missing file, a directory, an empty file, a binary file, a
named pipe nobody writes to, a character device, a symlink loop and a YAML "billion laughs"; every
path a command writes given as a directory, a path under a file, a read-only place, a named pipe
nobody reads, a full device; values of every scenario key in a config file (wrong types, NaN,
infinity, negative, zero, huge); and flags that do not apply to what was asked.

Character devices are private copies made with mknod in the case's directory (as root; skipped
otherwise); the system's /dev nodes are never written.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 25.0
"""A command given bad input answers in about a second here (imports included); 25 s is a hang."""
SLOW_TIMEOUT_S = 60.0
"""real and layers import torch and may start ranks before refusing."""
MEMORY_BYTES = 6 * 2**30
"""Address-space limit per case: torch's import maps ~2 GiB; a billion-laughs expansion passes 6."""
CLASSES = ("one-line", "failed", "accepted", "ok", "multi-line", "traceback", "hang", "memory", "wrote")
GOOD = {"one-line", "failed", "ok"}

BINARY = bytes(range(128, 256)) * 8
LAUGHS = "".join(
    ["x-laughs:\n", "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
    + [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)]
)
"""A 1 KB YAML whose aliases expand to 9^9 = 387 M strings (the 'billion laughs')."""
MINI = "name: mini\nworkload: mlp\ncluster: {gpus_per_node: 2}\nsweep: {cluster.gpus: [1, 2]}\n"
MODEL_PY = "from torch import nn\n\n\ndef Net():\n    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"


@dataclass
class Case:
    id: str
    family: str
    argv: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Files made in the case's directory: text, bytes, or a special: FIFO, DIR, LOOP, ZERO_DEV,
    FULL_DEV, NULL_DEV (private character devices), MINI_RESULTS (a finished experiment)."""
    ok: bool = False
    """The input is legitimate: exit 0 is the right answer."""
    allow_failed: bool = True
    """Exit 1 with one line counts as right (a run that failed, a full device)."""
    timeout_s: float = TIMEOUT_S

    @property
    def command(self) -> str:
        return self.argv[0]


# -- the families ---------------------------------------------------------------------------

NUMBERS = {"zero": "0", "negative": "-1", "nan": "nan", "inf": "inf", "huge": "1e30", "huge-int": "1000000000",
           "fraction": "2.5", "text": "abc"}

COMMAND_BASES: dict[str, list[str]] = {
    # arguments that make each command's good path quick, so that accepted input is told from a hang
    "simulate": ["--model", "mlp", "--gpus", "4", "--gpus-per-node", "2"],
    "explain": ["--model", "mlp", "--gpus", "4", "--gpus-per-node", "2", "--measured-iteration-s", "0.01"],
    "plan": ["--model", "mlp", "--gpus", "4", "--gpus-per-node", "4", "--top", "1", "--out", "planout"],
    "collective": ["-b", "8", "-e", "64"],
    "bench": ["--gpus", "64", "--repeats", "1", "--async-workers", "0", "--plan-repeats", "0"],
    "run": ["mini.yaml", "--no-plot", "--no-progress", "--jobs", "1"],
    "regress": ["--quiet"],
    "real": ["--model", "mlp", "--gpus", "1", "--iterations", "1", "--warmup", "0", "--out", "row.csv"],
    "layers": ["m.py:Net", "--input-shape", "2,4"],
}
BASE_FILES: dict[str, dict[str, str | bytes]] = {"run": {"mini.yaml": MINI}, "layers": {"m.py": MODEL_PY}}
NUMBER_OK = {
    # (command, flag, family): a legitimate value (exit 0 is right)
    **{(c, "--seed", "zero"): True for c in ("simulate", "real", "explain")},
    # no spread, no jitter: every rank at its nominal speed (as --no-stragglers)
    **{(c, f, "zero"): True for c in ("simulate", "explain", "plan") for f in ("--gpu-cv", "--iteration-cv")},
    ("collective", "--idle-ms", "zero"): True,
    ("bench", "--async-workers", "zero"): True, ("bench", "--plan-repeats", "zero"): True,
    ("bench", "--async-jitter-cv", "zero"): True,
    ("real", "--warmup", "zero"): True,
    ("plan", "--verify", "zero"): True,
    ("plan", "--oversubscription", "zero"): False,
    **{(c, "--jitter-cv", "zero"): True for c in ("simulate", "explain")},  # no jitter: nothing to refuse
    ("plan", "--oversubscription", "fraction"): True, ("plan", "--max-memory-gib", "fraction"): True,
    **{(c, "--bucket-mib", "fraction"): True for c in ("simulate", "explain")},
    **{(c, "--seed", "huge-int"): True for c in ("simulate", "real", "explain")},  # any seed is a seed
    # 10^9 MiB: one bucket (the chainermn preset writes 1e9)
    **{(c, "--bucket-mib", "huge-int"): True for c in ("simulate", "explain")},
    # a fast GPU on a tiny model
    **{(c, "--single-gpu-samples-per-s", "huge-int"): True for c in ("simulate", "explain")},
    # limits: a huge one is no limit
    **{("plan", f, "huge-int"): True for f in ("--top", "--max-tp", "--max-pp", "--max-micro-batches",
                                               "--max-candidates")},
    ("collective", "--stepfactor", "huge-int"): True,  # one size: -b
    ("real", "--bucket-mib", "huge-int"): True,  # one bucket
    **{("plan", f, "huge-int"): True for f in ("--max-cp", "--max-vpp", "--max-ep")},
}
SKIP_FLAGS = {
    # flags whose good path measures this machine for minutes (calibrate, validate's harness) or
    # rewrites committed files: their bad values are tried where a check comes first
    ("calibrate", "*"), ("validate", "*"), ("layers", "--tokens"),
}


def _parser_actions():
    import argparse as ap

    from scalebench.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, ap._SubParsersAction))
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if isinstance(action, ap._HelpAction) or not action.option_strings:
                continue
            yield name, action


def number_cases() -> list[Case]:
    import argparse as ap

    cases = []
    for command, action in _parser_actions():
        flag = action.option_strings[-1]
        if (command, "*") in SKIP_FLAGS or (command, flag) in SKIP_FLAGS or command not in COMMAND_BASES:
            continue
        kind = action.type
        numeric = kind in (int, float) or getattr(kind, "__name__", "") in ("parse", "byte_size")
        if not numeric or isinstance(action, ap._StoreConstAction) or action.nargs == 0:
            continue
        for family, value in NUMBERS.items():
            if kind is float and family == "fraction":
                continue
            argv = [command, *_base_without(command, flag), flag, value]
            ok = NUMBER_OK.get((command, flag, family), False)
            cases.append(Case(f"{command} {flag} {value}", f"number:{family}", argv, dict(BASE_FILES.get(command, {})),
                              ok=ok, timeout_s=_timeout(command)))
    return cases


EXCLUSIVE = {("explain", "--measured-samples-per-s"): "--measured-iteration-s"}
"""A flag the base sets that the one tried excludes (one measurement or the other)."""


def _base_without(command: str, flag: str) -> list[str]:
    base = list(COMMAND_BASES.get(command, []))
    for name in (flag, EXCLUSIVE.get((command, flag))):
        if name in base:
            i = base.index(name)
            del base[i:i + 2]
    return base


def _timeout(command: str) -> float:
    return SLOW_TIMEOUT_S if command in ("real", "layers", "bench", "plan") else TIMEOUT_S


NAME_FLAGS = {
    "simulate": ["--model", "--gpu", "--intra-link", "--inter-link", "--fabric", "--placement", "--framework", "--backend",
                 "--protocol", "--collective", "--precision", "--fidelity", "--codec", "--codec-path", "--schedule",
                 "--ps-mode", "--ps-placement", "--flow-engine", "--nccl-version", "--mpi-library", "--mpi-gpu-buffers",
                 "--host"],
    "explain": ["--model", "--gpu", "--intra-link", "--inter-link", "--framework", "--backend", "--collective",
                "--codec", "--host", "--nccl-version"],
    "plan": ["--model", "--gpu", "--intra-link", "--inter-link", "--precision", "--objective", "--backends",
             "--collectives", "--codecs", "--schedules", "--bucket-mib"],
    "collective": ["--op", "--backend", "--gpu", "--intra-link", "--inter-link", "--algo", "--proto", "--nccl-version",
                   "--mpi-library", "--mpi-gpu-buffers", "--host"],
    "bench": ["--model", "--collective", "--fabric", "--plan-model"],
    "real": ["--model", "--collective", "--codec", "--schedule", "--ps-mode", "--strategy", "--backend", "--link",
             "--collectives"],
    "layers": ["--name"],
}


def name_cases() -> list[Case]:
    cases = []
    for command, flags in NAME_FLAGS.items():
        for flag in flags:
            for family, value in (("unknown", "zz_unknown"), ("empty", ""), ("newline", "a\nb")):
                if command == "layers" and family == "unknown":
                    continue  # any name is a name
                argv = [command, *_base_without(command, flag), flag, value]
                cases.append(Case(f"{command} {flag} {value!r}", f"name:{family}", argv,
                                  dict(BASE_FILES.get(command, {})), timeout_s=_timeout(command)))
    return cases


INPUT_PATHS = {
    # (command, how the path is given): the base arguments the path joins
    ("simulate", "CONFIG"): ["simulate"], ("simulate", "--catalog"): ["simulate"],
    ("explain", "CONFIG"): ["explain", "--measured-iteration-s", "0.01"],
    ("explain", "--catalog"): ["explain", "--measured-iteration-s", "0.01"],
    ("run", "CONFIG"): ["run", "--no-plot", "--no-progress"], ("plan", "CONFIG"): ["plan", "--model", "mlp"],
    ("list", "--catalog"): ["list", "links"], ("collective", "--catalog"): ["collective", "-b", "8", "-e", "8"],
    ("regress", "--suite"): ["regress"], ("regress", "--baselines"): ["regress", "--quiet"],
    ("plot", "RESULTS"): ["plot"], ("report", "RESULTS"): ["report"], ("plot", "--timeline"): ["plot"],
    ("real", "CONFIG"): ["real", "--iterations", "1", "--warmup", "0", "--out", "row.csv"],
    ("layers", "--profile"): ["layers", "m.py:Net", "--input-shape", "2,4", "-o", "t.csv"],
    ("validate", "--data"): ["validate", "--suite", "devset"],
    ("calibrate", "--from-nccl-tests"): ["calibrate", "--out", "o"],
    ("calibrate", "--from-runs"): ["calibrate", "--out", "o"],
    ("simulate", "layers_file"): ["simulate", "c.yaml"],
    ("simulate", "fabric"): ["simulate", "--gpus", "4", "--gpus-per-node", "1"],
}
DIRECTORY_INPUTS = {("regress", "--baselines"), ("plot", "RESULTS"), ("report", "RESULTS"), ("validate", "--data")}
YAML_INPUTS = {("simulate", "CONFIG"), ("simulate", "--catalog"), ("explain", "CONFIG"), ("explain", "--catalog"), ("run", "CONFIG"), ("plan", "CONFIG"),
               ("list", "--catalog"), ("collective", "--catalog"), ("regress", "--suite"), ("real", "CONFIG"),
               ("simulate", "fabric")}


def input_path_cases() -> list[Case]:
    kinds: dict[str, str | bytes] = {"missing": "", "directory": "DIR", "empty": "", "binary": BINARY, "fifo": "FIFO",
                                     "char-device": "ZERO_DEV", "symlink-loop": "LOOP", "laughs": LAUGHS,
                                     "empty-name": ""}
    cases = []
    for (command, how), base in INPUT_PATHS.items():
        directory = (command, how) in DIRECTORY_INPUTS
        for family, content in kinds.items():
            if family == "laughs" and (command, how) not in YAML_INPUTS:
                continue
            if directory and family in ("binary", "laughs"):
                continue
            name = "in.yaml" if (command, how) in YAML_INPUTS else "in.dat"
            files: dict[str, str | bytes] = {} if family in ("missing", "empty-name") else {name: content}
            files.update(BASE_FILES.get("layers" if command == "layers" else command, {}))
            target = "" if family == "empty-name" else name
            argv = list(base)
            if how == "layers_file":
                files["c.yaml"] = f"workload: {{layers_file: {name}, batch_size: 8}}\n"
            elif how == "fabric":
                argv += ["--fabric", name, "--fidelity", "detailed"]
            elif how in ("CONFIG", "RESULTS"):
                argv.insert(1, target)
            else:
                argv += [how, target]
            cases.append(Case(f"{command} {how} <{family}>", f"input:{family}", argv, files, timeout_s=_timeout(command)))
    # a directory a command reads as a whole, empty
    cases.append(Case("regress --baselines <empty directory>", "input:empty-directory",
                      ["regress", "--quiet", "--baselines", "d"], {"d": "DIR"}))
    return cases


OUTPUT_PATHS = {
    ("simulate", "--trace"): ["simulate", "--model", "mlp", "--gpus", "2"],
    ("schema", "-o"): ["schema"],
    ("report", "--out"): ["report", "results/mini"],
    ("run", "--results"): ["run", "mini.yaml", "--no-plot", "--no-progress", "--jobs", "1"],
    ("plot", "-o"): ["plot", "--timeline", "t.json"],
    ("plan", "--out"): ["plan", "--model", "mlp", "--gpus", "4", "--gpus-per-node", "4", "--top", "1"],
    ("real", "--out"): ["real", "--model", "mlp", "--gpus", "1", "--iterations", "1", "--warmup", "0"],
    ("layers", "-o"): ["layers", "m.py:Net", "--input-shape", "2,4"],
    ("simulate", "--links"): ["simulate", "--model", "mlp", "--gpus", "4", "--gpus-per-node", "1", "--fidelity", "detailed"],
}


def output_path_cases() -> list[Case]:
    root = os.geteuid() == 0
    kinds = {"directory": ("DIR", False), "under-a-file": ("FILE/x", False), "read-only": ("/sys/kernel/x", False),
             "fifo-no-reader": ("FIFO", False), "full-device": ("FULL_DEV", False), "null-device": ("NULL_DEV", True),
             "symlink": ("LINK", True), "dangling-symlink": ("DANGLING", True), "newline": ("a\nb.json", False),
             "empty-name": ("", False)}
    cases = []
    for (command, flag), base in OUTPUT_PATHS.items():
        for family, (what, ok) in kinds.items():
            if family in ("full-device", "null-device") and not root:
                continue
            files: dict[str, str | bytes] = dict(BASE_FILES.get(command, {}))
            if command == "report":
                files["results"] = "MINI_RESULTS"
            if command == "plot":
                files["t.json"] = _TRACE
            directory_out = command in ("run", "plan")
            if what == "FILE/x":
                files["afile"] = "x"
                target = "afile/x"
            elif what.startswith("/"):
                target = what
            elif what == "LINK":
                files["real_target"] = "DIR" if directory_out else "old"
                files["out"] = "LINK:real_target"
                target = "out"
            elif what == "DANGLING":
                files["out"] = "LINK:nowhere/x"
                target = "out"
                ok = False
            elif what == "":
                target = ""
            elif what == "a\nb.json":
                target = what
                ok = True  # an odd name, but a name
            else:
                files["out"] = what
                target = "out"
            if directory_out and family in ("fifo-no-reader", "full-device", "null-device"):
                ok = False
            if (directory_out or command == "plot") and family == "directory":
                ok = True  # run/plan write into it; plot -o DIR writes DIR.png and DIR.svg beside it
            if command == "plot" and family in ("fifo-no-reader", "full-device", "null-device", "dangling-symlink"):
                ok = True  # -o NAME writes NAME.png and NAME.svg: the node itself is not the output
            argv = [*base, flag, target]
            cases.append(Case(f"{command} {flag} <{family}>", f"output:{family}", argv, files, ok=ok,
                              timeout_s=_timeout(command)))
    return cases


_TRACE = ('{"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1}], '
          '"otherData": {"scenario": "t"}}')

SCENARIO_KEYS = {
    "workload": {"batch_size": "int", "seq_len": "int", "model": "name", "optimizer": "name"},
    "cluster": {"gpus": "int", "nodes": "int", "gpus_per_node": "int", "nics_per_node": "int", "oversubscription": "float",
                "gpu": "name", "intra_link": "name", "inter_link": "name", "topology": "name", "placement": "name"},
    "strategy": {"bucket_mib": "float", "first_bucket_mib": "float", "ps_servers": "int", "tp": "int", "pp": "int",
                 "dp": "int", "micro_batches": "int", "fusion_mib": "float", "cycle_time_ms": "float", "overlap": "bool",
                 "collective": "name", "precision": "name", "codec": "name", "schedule": "name", "backend": "name",
                 "framework": "name", "kind": "name", "ps_mode": "name", "protocol": "name",
                 "nccl_socket_nthreads": "int", "nccl_nsocks_perthread": "int", "pipeline_overhead_s": "float"},
    "simulation": {"seed": "int", "fidelity": "name", "check_memory": "bool", "flow_engine": "name"},
}
YAML_VALUES = {"zero": "0", "negative": "-1", "nan": ".nan", "inf": ".inf", "huge": "1e30", "huge-int": "1000000000",
               "fraction": "2.5",
               "text": "abc", "list": "[1]", "mapping": "{a: 1}", "null": "null", "bool": "true"}
YAML_OK = {
    # (section.key, family): legitimate
    ("simulation.seed", "zero"), ("strategy.pipeline_overhead_s", "zero"), ("strategy.cycle_time_ms", "zero"),
    ("cluster.oversubscription", "fraction"), ("cluster.oversubscription", "huge"),  # 2.5 is a ratio; huge: see below
    ("strategy.bucket_mib", "fraction"), ("strategy.fusion_mib", "fraction"), ("strategy.first_bucket_mib", "fraction"),
    ("strategy.cycle_time_ms", "fraction"), ("strategy.pipeline_overhead_s", "fraction"),
    ("strategy.overlap", "bool"), ("simulation.check_memory", "bool"),
    ("strategy.bucket_mib", "huge-int"), ("strategy.first_bucket_mib", "huge-int"), ("strategy.fusion_mib", "huge-int"),
    ("simulation.seed", "huge-int"),
    # null: the key's default
    *((f"{s}.{k}", "null") for s, keys in SCENARIO_KEYS.items() for k in keys),
}


def yaml_field_cases() -> list[Case]:
    cases = []
    for section, keys in SCENARIO_KEYS.items():
        for key, kind in keys.items():
            for family, value in YAML_VALUES.items():
                if kind == "bool" and family in ("zero",):
                    pass
                body = {"workload": "model: mlp", "cluster": "gpus: 4, gpus_per_node: 2", "strategy": "", "simulation": ""}
                line = f"{key}: {value}"
                body[section] = f"{body[section]}, {line}" if body[section] else line
                text = "".join(f"{s}: {{{v}}}\n" for s, v in body.items() if v)
                full = f"{section}.{key}"
                ok = (full, family) in YAML_OK
                cases.append(Case(f"simulate {full}: {value}", f"yaml:{family}", ["simulate", "c.yaml"], {"c.yaml": text},
                                  ok=ok))
    return cases


SECTION_KEYS = {
    # (what, the config's other lines, the section's path, its keys and kinds, the argv)
    "experiment": ("name: e\nworkload: mlp\nsweep: {cluster.gpus: [1, 2]}\n", "",
                   {"repetitions": "int", "seed": "int", "max_points": "int", "iterations": "int", "backend": "name"},
                   ["run", "c.yaml", "--dry-run"]),
    "heterogeneity": ("workload: mlp\ncluster: {gpus: 4, gpus_per_node: 2}\n", "heterogeneity",
                      {"jitter_cv": "float", "slow_nodes": "int", "slow_factor": "float", "mixed_gpus": "name"},
                      ["simulate", "c.yaml", "--iterations", "3"]),
    "faults": ("workload: mlp\ncluster: {gpus: 4, gpus_per_node: 2}\n", "faults",
               {"fail_rank": "int", "fail_at_s": "float", "checkpoint_interval_s": "float", "checkpoint_s": "float",
                "restart_s": "float"}, ["simulate", "c.yaml", "--iterations", "3"]),
    "variability": ("workload: mlp\ncluster: {gpus: 4, gpus_per_node: 2}\n", "variability",
                    {"stragglers": "bool", "gpu_cv": "float", "iteration_cv": "float"}, ["simulate", "c.yaml"]),
    "catalog link": ("workload: mlp\ncluster: {gpus: 4, gpus_per_node: 2, inter_link: x}\n", "catalog.links.x",
                     {"bandwidth_Gbps": "float", "latency_us": "float", "software_latency_us": "float",
                      "efficiency": "float", "mtu_bytes": "int", "per_flow_Gbps": "float", "tcp_window_MiB": "float",
                      "tcp_stream_Gbps": "float", "kind": "name", "nic_vendor": "name", "base": "name"},
                     ["simulate", "c.yaml"]),
    "catalog gpu": ("workload: mlp\ncluster: {gpus: 4, gpus_per_node: 2, gpu: g}\n", "catalog.gpus.g",
                    {"memory_bandwidth_GBps": "float", "memory_GiB": "float", "efficiency": "float",
                     "launch_overhead_us": "float", "compute_capability": "float", "nvlinks": "int", "sm_count": "int",
                     "kind": "name"}, ["simulate", "c.yaml"]),
    "architecture": ("cluster: {gpus: 4, gpus_per_node: 2}\n", "workload.architecture",
                     {"layers": "int", "hidden": "int", "heads": "int", "kv_heads": "int", "ffn_hidden": "int",
                      "seq_len": "int", "vocab": "int", "family": "name"}, ["simulate", "c.yaml"]),
    "plan": ("name: e\nworkload: mlp\ncluster: {gpus: 4, gpus_per_node: 4}\n", "plan",
             {"max_gpus": "int", "global_batch": "int", "top": "int", "max_tp": "int", "max_pp": "int",
              "max_micro_batches": "int", "max_memory_gib": "float", "max_candidates": "int", "objective": "name"},
             ["run", "c.yaml", "--dry-run"]),
}
SECTION_BASES = {
    "catalog link": {"bandwidth_Gbps": "10", "latency_us": "1"},
    "catalog gpu": {"peak_tflops": "{fp32: 10}", "memory_bandwidth_GBps": "900", "memory_GiB": "16"},
    "architecture": {"layers": "2", "hidden": "64", "heads": "4", "seq_len": "16", "vocab": "100"},
    "heterogeneity": {"jitter_cv": "0.1"},
    "faults": {"fail_rank": "1", "fail_at_s": "0.0001"},
    "plan": {"objective": "time"},
}
SECTION_OK = {
    # (what, key, family): legitimate values
    ("experiment", "seed", "zero"), ("variability", "gpu_cv", "zero"), ("variability", "iteration_cv", "zero"),
    ("variability", "gpu_cv", "fraction"), ("variability", "iteration_cv", "fraction"),  # 2.5: a wide spread, < 10
    ("variability", "stragglers", "bool"),
    ("heterogeneity", "jitter_cv", "zero"), ("heterogeneity", "slow_nodes", "zero"),
    ("faults", "fail_rank", "zero"), ("faults", "fail_at_s", "zero"), ("faults", "fail_at_s", "inf"),
    ("faults", "checkpoint_interval_s", "inf"), ("faults", "fail_at_s", "huge"), ("faults", "checkpoint_interval_s", "huge"), ("faults", "checkpoint_s", "zero"), ("faults", "restart_s", "zero"),
    ("catalog link", "latency_us", "zero"), ("catalog link", "software_latency_us", "zero"),
    ("catalog gpu", "launch_overhead_us", "zero"), ("catalog gpu", "nvlinks", "zero"), ("catalog gpu", "sm_count", "zero"),
    ("heterogeneity", "jitter_cv", "fraction"), ("heterogeneity", "slow_factor", "fraction"),
    ("faults", "fail_at_s", "fraction"), ("faults", "checkpoint_interval_s", "fraction"),
    ("faults", "checkpoint_s", "fraction"), ("faults", "restart_s", "fraction"),
    ("catalog link", "bandwidth_Gbps", "fraction"), ("catalog link", "latency_us", "fraction"),
    ("catalog link", "software_latency_us", "fraction"), ("catalog link", "per_flow_Gbps", "fraction"),
    ("catalog link", "tcp_window_MiB", "fraction"), ("catalog link", "tcp_stream_Gbps", "fraction"),
    ("catalog gpu", "memory_bandwidth_GBps", "fraction"), ("catalog gpu", "memory_GiB", "fraction"),
    ("catalog gpu", "launch_overhead_us", "fraction"), ("catalog gpu", "compute_capability", "fraction"),
    ("plan", "max_memory_gib", "fraction"),
    # a very large rate is how an ideal device or a free link is written (sim/catalog.py MAX_LATENCY_US)
    *(("catalog link", k, f) for k in ("bandwidth_Gbps", "per_flow_Gbps", "tcp_window_MiB", "tcp_stream_Gbps")
      for f in ("huge", "huge-int")),
    *(("catalog gpu", "memory_bandwidth_GBps", f) for f in ("huge", "huge-int")),
    ("experiment", "seed", "huge-int"), ("experiment", "max_points", "huge-int"), ("faults", "fail_at_s", "huge-int"),
    ("faults", "checkpoint_interval_s", "huge-int"),
    # a plan section is checked as a request by --dry-run; its points refuse what does not fit when run
    *(("plan", k, "huge-int") for k in ("global_batch", "top", "max_tp", "max_pp", "max_micro_batches",
                                        "max_candidates", "max_gpus")),
    *((what, key, "null") for what, (_, _, keys, _) in [] for key in keys),
}


def section_cases() -> list[Case]:
    """Every key of the other config sections given each kind of bad value."""
    cases = []
    for what, (head, path, keys, argv) in SECTION_KEYS.items():
        for key, kind in keys.items():
            for family, value in YAML_VALUES.items():
                if family == "null":
                    continue  # a key's default
                if kind == "name" and family in ("zero", "negative", "nan", "inf", "huge", "fraction", "bool"):
                    continue  # the name family covers a name's bad values with text, lists and mappings
                entries = {**SECTION_BASES.get(what, {}), key: value}
                body = ", ".join(f"{k}: {v}" for k, v in entries.items())
                if not path:
                    text = head + "".join(f"{k}: {v}\n" for k, v in entries.items())
                elif path == "workload.architecture":
                    text = head + f"workload: {{model: decoder, architecture: {{{body}}}}}\n"
                elif path.startswith("catalog."):
                    _, kind_of, name = path.split(".")
                    text = head + f"catalog: {{{kind_of}: {{{name}: {{{body}}}}}}}\n"
                else:
                    text = head + f"{path}: {{{body}}}\n"
                cases.append(Case(f"{what} {key}: {value}", f"section:{family}", list(argv), {"c.yaml": text},
                                  ok=(what, key, family) in SECTION_OK))
    return cases


def not_applying_cases() -> list[Case]:
    """Flags (and keys) that do not apply to what was asked: said in one line, not ignored."""
    s = ["simulate", "--model", "mlp", "--gpus", "4", "--gpus-per-node", "2"]
    rows = [
        ("simulate --fabric on the fast path", [*s, "--fabric", "fat_tree"]),
        ("simulate --placement on the fast path", [*s, "--placement", "random"]),
        ("simulate --flow-engine on the fast path", [*s, "--flow-engine", "event"]),
        ("simulate --micro-batches without --pp", [*s, "--micro-batches", "4"]),
        ("simulate --schedule without --pp", [*s, "--schedule", "1f1b"]),
        ("simulate --ps-servers without ps", [*s, "--ps-servers", "4", "--collective", "ring"]),
        ("simulate --ps-mode without ps", [*s, "--ps-mode", "async", "--collective", "ring"]),
        ("simulate --ps-placement without ps", [*s, "--ps-placement", "colocated", "--collective", "ring"]),
        ("simulate --codec-path without a codec", [*s, "--codec-path", "allgather"]),
        ("simulate --protocol with gloo", [*s, "--backend", "gloo", "--protocol", "LL"]),
        ("simulate tf_ps with a ring", [*s, "--framework", "tf_ps", "--collective", "ring"]),
        ("simulate NCCL on CPUs", [*s, "--gpu", "cpu", "--backend", "nccl"]),
        ("simulate 10^6 GPUs per node", ["simulate", "--model", "mlp", "--gpus", "8", "--gpus-per-node", "1000000"]),
        ("simulate 1000 NICs on a 4-GPU node", [*s[:4], "--gpus", "16", "--gpus-per-node", "4", "--nics-per-node", "1000"]),
        ("simulate --jitter-cv without --iterations", [*s, "--jitter-cv", "0.3"]),
        ("simulate --gpu-cv with --no-stragglers", [*s, "--no-stragglers", "--gpu-cv", "0.05"]),
        ("explain --schedule without --pp", ["explain", *s[1:], "--schedule", "1f1b", "--measured-iteration-s", "0.01"]),
        ("explain --calibration-batch alone", ["explain", *s[1:], "--calibration-batch", "8"]),
        ("simulate --calibration-batch alone", [*s, "--calibration-batch", "8"]),
        ("simulate --links on the fast path", [*s, "--links", "l.csv"]),
        ("simulate --format with --trace csv", [*s, "--format", "csv", "--trace", "t.json"]),
        ("run --address without --executor", ["run", "mini.yaml", "--address", "127.0.0.1:1", "--dry-run"]),
        ("real --topology without --link", ["real", "--model", "mlp", "--gpus", "1", "--topology", "per_link",
                                            "--iterations", "1", "--warmup", "0", "--out", "r.csv"]),
        ("real --comm with --bench", ["real", "--comm", "--bench"]),
        ("real --collectives without --comm", ["real", "--model", "mlp", "--gpus", "1", "--collectives", "allreduce",
                                               "--iterations", "1", "--warmup", "0", "--out", "r.csv"]),
        ("real --max-bytes without --comm", ["real", "--model", "mlp", "--gpus", "1", "--max-bytes", "1M",
                                             "--iterations", "1", "--warmup", "0", "--out", "r.csv"]),
        ("real --link 0mbit", ["real", "--model", "mlp", "--gpus", "2", "--link", "0mbit", "--iterations", "1"]),
        ("plot -o without --timeline", ["plot", "results/mini", "-o", "x.png"]),
        ("collective --proto with gloo", ["collective", "--backend", "gloo", "--proto", "LL", "-b", "8", "-e", "8"]),
        ("collective --nccl-socket-nthreads with gloo", ["collective", "--backend", "gloo", "--nccl-socket-nthreads", "2",
                                                         "-b", "8", "-e", "8"]),
        ("bench --fabric on the fast path", ["bench", "--fabric", "fat_tree"]),
        ("layers --check without --zoo", ["layers", "m.py:Net", "--input-shape", "2,4", "--check"]),
        ("validate --replay with devset", ["validate", "--suite", "devset", "--replay"]),
        ("regress --update with --quiet into nothing", ["regress", "--baselines", "nope", "--quiet"]),
        ("list --catalog with models", ["list", "models", "--catalog", "k.yaml"]),
        ("plan --max-gpus 1048576", ["plan", "--model", "mlp", "--gpus", "8", "--max-gpus", "1048576", "--out", "p"]),
        ("bench --async-workers 1048576", ["bench", "--gpus", "64", "--repeats", "1", "--plan-repeats", "0",
                                           "--async-workers", "1048576"]),
        ("layers --input-shape of 206 GB on cpu", ["layers", "m.py:Net", "--input-shape", "100000000,4,128,1",
                                                   "--device", "cpu"]),
    ]
    legit = {"simulate --micro-batches without --pp": "gradient accumulation, said in the header",
             "simulate --fabric on the fast path": "the fast path takes the ring's tier from it, and says so",
             "plan --max-gpus 1048576": "the largest allowed; the search says up front how long it takes",
             "simulate --format with --trace csv": "the row on stdout, the trace in its file"}
    cases = []
    for name, argv in rows:
        files: dict[str, str | bytes] = dict(BASE_FILES.get(argv[0], {}))
        if argv[0] == "plot":
            files["results"] = "MINI_RESULTS"
        if argv[0] == "list":
            files["k.yaml"] = "links: {}\n"
        timeout = 240.0 if name.startswith("plan --max-gpus") else _timeout(argv[0])
        cases.append(Case(name, "not-applying", argv, files, ok=name in legit, timeout_s=timeout))
    return cases


def content_cases() -> list[Case]:
    """Files whose content is wrong in ways that used to pass: layer tables, traces, results, CSVs."""
    head = "layer,kind,param_count,fwd_flops,bwd_flops,activation_elems"
    layer_tables = {
        "negative param_count": f"{head}\nl0,linear,-1000,1e9,2e9,10\n",
        "negative fwd_flops": f"{head}\nl0,linear,10,-1e9,2e9,10\n",
        "nan fwd_flops": f"{head}\nl0,linear,10,nan,2e9,10\n",
        "inf activation_elems": f"{head}\nl0,linear,10,1e9,2e9,inf\n",
        "fractional param_count": f"{head}\nl0,linear,10.5,1e9,2e9,10\n",
        "misspelt time column": f"{head},fwd_time\nl0,linear,10,1e9,2e9,10,0.1\n",
        "more cells than header": f"{head}\nl0,linear,10,1e9,2e9,10,99\n",
        "fewer cells than header": f"{head}\nl0,linear,10,1e9\n",
        "negative meta batch_size": f'# meta: {{"batch_size": -8}}\n{head}\nl0,linear,10,1e9,2e9,10\n',
        "only a header": f"{head}\n",
        "one time column": f"{head},fwd_time_s\nl0,linear,10,1e9,2e9,10,0.1\n",
    }
    cases = [Case(f"simulate layers_file: {what}", "content:layers_file", ["simulate", "c.yaml"],
                  {"c.yaml": "workload: {layers_file: t.csv, batch_size: 8}\n", "t.csv": text})
             for what, text in layer_tables.items()]
    cases.append(Case("simulate layers_file: negative meta batch_size, no batch_size key", "content:layers_file",
                      ["simulate", "c.yaml"], {"c.yaml": "workload: {layers_file: t.csv}\n",
                                               "t.csv": layer_tables["negative meta batch_size"]}))
    inline = {
        "no fwd_flops": "[{param_count: 1000}]",
        "negative param_count": "[{fwd_flops: 1e9, param_count: -5}]",
        "unknown key": "[{fwd_flops: 1e9, fwd_time: 1}]",
    }
    cases += [Case(f"simulate inline layer: {what}", "content:layers", ["simulate", "c.yaml"],
                   {"c.yaml": f"workload: {{layers: {rows}}}\n"}) for what, rows in inline.items()]
    traces = {
        "no events": '{"traceEvents": []}',
        "nan timestamp": '{"traceEvents": [{"name": "x", "ph": "X", "ts": NaN, "dur": 10, "pid": 1, "tid": 1}]}',
        "not a trace": '{"a": 1}',
        "a list of nothing": "[]",
        "negative duration": '{"traceEvents": [{"name": "x", "ph": "X", "ts": 0, "dur": -10, "pid": 1, "tid": 1}]}',
        "text timestamp": '{"traceEvents": [{"name": "x", "ph": "X", "ts": "a", "dur": 10, "pid": 1, "tid": 1}]}',
    }
    cases += [Case(f"plot --timeline: {what}", "content:trace", ["plot", "--timeline", "t.json", "-o", "p.png"],
                   {"t.json": text}) for what, text in traces.items()]
    cases.append(Case("plot results.csv of NaN", "content:results", ["plot", "results/mini"],
                      {"results": "MINI_RESULTS_NAN"}))
    cases.append(Case("report results.csv of NaN", "content:results", ["report", "results/mini"],
                      {"results": "MINI_RESULTS_NAN"}))
    catalogs = {"empty": "", "null": "null\n", "empty mapping": "{}\n", "links empty": "links: {}\n",
                "unknown section": "nics: {}\n"}
    for what, text in catalogs.items():
        for argv in (["list", "links", "--catalog", "k.yaml"], ["collective", "--catalog", "k.yaml", "-b", "8", "-e", "8"],
                     ["simulate", "--catalog", "k.yaml", "--model", "mlp", "--gpus", "2"]):
            cases.append(Case(f"{argv[0]} --catalog: {what}", "content:catalog", argv, {"k.yaml": text}))
    experiments = {
        "case and axis set one key": ("name: e\nworkload: mlp\ncluster: {gpus_per_node: 2}\nsweep:\n"
                                      "  cluster.gpus: [2, 4]\n  cluster.inter_link: [tcp_10gbe, ib_edr]\n  case:\n"
                                      "    - {label: a, cluster.inter_link: tcp_10gbe}\n"
                                      "    - {label: b, cluster.inter_link: ib_edr}\n"),
        "two cases, one label": ("name: e\nworkload: mlp\ncluster: {gpus_per_node: 2}\nsweep:\n  cluster.gpus: [2, 4]\n"
                                 "  case:\n    - {label: a, strategy.collective: ring}\n"
                                 "    - {label: a, strategy.collective: tree}\n"),
        "name with a newline": 'name: "a\\nb"\nworkload: mlp\nsweep: {cluster.gpus: [1, 2]}\n',
        "name with a tab": 'name: "a\\tb"\nworkload: mlp\nsweep: {cluster.gpus: [1, 2]}\n',
        "axis inside an axis": ("name: e\nworkload: mlp\nsweep:\n  cluster: [{gpus: 2}]\n  cluster.gpus: [2, 4]\n"),
    }
    cases += [Case(f"run: {what}", "content:experiment", ["run", "e.yaml", "--dry-run"], {"e.yaml": text})
              for what, text in experiments.items()]
    cases.append(Case("run: a stale lock of another host", "content:lock",
                      ["run", "mini.yaml", "--no-plot", "--no-progress", "--jobs", "1"],
                      {"mini.yaml": MINI, "results": "STALE_LOCKS"}, allow_failed=False, ok=True))
    cases.append(Case("run: points path is a file", "content:results",
                      ["run", "mini.yaml", "--no-plot", "--no-progress", "--jobs", "1"],
                      {"mini.yaml": MINI, "results/mini/points": "x"}))
    return cases


FAMILIES = {"number": number_cases, "name": name_cases, "input": input_path_cases, "output": output_path_cases,
            "yaml": yaml_field_cases, "section": section_cases, "not-applying": not_applying_cases,
            "content": content_cases}


# -- running --------------------------------------------------------------------------------

_MINI_CACHE: dict[str, Path] = {}


def _mini_results(nan: bool = False) -> Path:
    """A finished two-point experiment (made once per driver run); ``nan``: its numbers all NaN."""
    key = "nan" if nan else "ok"
    if key not in _MINI_CACHE:
        root = Path(tempfile.mkdtemp(prefix="bad-input-mini-"))
        (root / "mini.yaml").write_text(MINI)
        subprocess.run([sys.executable, "-m", "scalebench", "run", "mini.yaml", "--results", "results", "--jobs", "1",
                        "--no-progress"], cwd=root, check=True, capture_output=True, timeout=300)
        if nan:
            import csv

            path = root / "results" / "mini" / "results.csv"
            rows = list(csv.DictReader(path.open()))
            for row in rows:
                for k, v in row.items():
                    try:
                        float(v)
                    except ValueError:
                        continue
                    if k not in ("world_size", "gpus", "cluster.gpus", "nodes", "gpus_per_node"):
                        row[k] = "nan"
            with path.open("w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        _MINI_CACHE[key] = root / "results"
    return _MINI_CACHE[key]


def _make(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content == "DIR":
            path.mkdir(exist_ok=True)
        elif content == "FIFO":
            os.mkfifo(path)
        elif content == "LOOP":
            path.symlink_to(path.name)
        elif isinstance(content, str) and content.startswith("LINK:"):
            path.symlink_to(content[5:])
        elif content in ("ZERO_DEV", "FULL_DEV", "NULL_DEV"):
            minor = {"ZERO_DEV": 5, "FULL_DEV": 7, "NULL_DEV": 3}[content]
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
            except PermissionError:  # not root: a FIFO stands in (also not a regular file)
                os.mkfifo(path)
        elif content in ("MINI_RESULTS", "MINI_RESULTS_NAN"):
            shutil.copytree(_mini_results(content.endswith("NAN")), path, dirs_exist_ok=True)
        elif content == "STALE_LOCKS":
            shutil.copytree(_mini_results(), path, dirs_exist_ok=True)
            points = path / "mini" / "points"
            for point in sorted(points.glob("*.json"))[:1]:
                point.unlink()
                lock = points / f"{point.stem}.lock"
                lock.write_text("abc def other-host.example\n")
                os.utime(lock, (time.time() - 86400, time.time() - 86400))  # a day old: its run is long gone
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    os.setsid()


@dataclass
class Outcome:
    case: Case
    verdict: str
    rc: int | None
    wall_s: float
    stderr: str


def run_case(case: Case) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="bad-input-") as tmp:
        root = Path(tmp)
        _make(root, case.files)
        before = _snapshot(root)
        env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", "SCALEBENCH_BIND_CORES": "0"}
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "scalebench", *case.argv], cwd=root, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=_limit_memory)
        try:
            out, err = proc.communicate(timeout=case.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            return Outcome(case, "hang", None, time.perf_counter() - start, err.decode(errors="replace")[-2000:])
        wall = time.perf_counter() - start
        text = err.decode(errors="replace")
        after = _snapshot(root)
        for name in list(after - before):  # a FIFO's reader never came, a link's target: made by us above
            if name.startswith("results/mini") and "results" in case.files:
                after.discard(name)
        verdict = judge(case, proc.returncode, text, wrote=bool(after - before))
        return Outcome(case, verdict, proc.returncode, wall, text[-2000:])


def judge(case: Case, rc: int, stderr: str, wrote: bool) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    if "MemoryError" in stderr or rc in (-9, 137) or "Cannot allocate memory" in stderr:
        return "memory"
    if "Traceback (most recent call last)" in stderr or rc < 0:
        return "traceback"
    if case.ok:
        return "ok" if rc == 0 else ("one-line" if rc == 2 and len(lines) == 1 else "multi-line" if rc == 2 else
                                     "failed" if rc == 1 and len(lines) == 1 else "traceback")
    if rc == 0:
        return "accepted"
    if len(lines) != 1 and rc in (1, 2):
        return "multi-line"
    if rc == 2:
        return "wrote" if wrote else "one-line"
    if rc == 1 and case.allow_failed:
        return "failed"
    return "multi-line"


def all_cases(pattern: str | None = None) -> list[Case]:
    cases = [c for family in FAMILIES.values() for c in family()]
    if pattern:
        cases = [c for c in cases if pattern in c.id or pattern in c.family]
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", metavar="TEXT", help="only the cases whose id or family contains TEXT")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="cases at a time (default 2)")
    parser.add_argument("--list", action="store_true", help="list the cases, run nothing")
    parser.add_argument("--verbose", action="store_true", help="print every case's verdict and stderr's last line")
    args = parser.parse_args(argv)
    cases = all_cases(args.k)
    if args.list:
        for c in cases:
            print(f"{c.family:<24} {c.id}")
        print(f"{len(cases)} cases")
        return 0
    start = time.perf_counter()
    outcomes: list[Outcome] = []
    try:
        return _run_all(cases, args, start, outcomes)
    finally:
        for results in _MINI_CACHE.values():  # the finished experiments the cases copied
            shutil.rmtree(results.parent, ignore_errors=True)


def _run_all(cases: list[Case], args: argparse.Namespace, start: float, outcomes: list[Outcome]) -> int:
    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for outcome in pool.map(run_case, cases):
            outcomes.append(outcome)
            if args.verbose or outcome.verdict not in GOOD:
                last = (outcome.stderr.strip().splitlines() or [""])[-1][:160]
                print(f"{outcome.verdict:<10} rc={outcome.rc!s:<4} {outcome.wall_s:5.1f}s  {outcome.case.id!r}  {last}",
                      flush=True)
    counts = collections.Counter(o.verdict for o in outcomes)
    by_family: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        by_family[o.case.family.split(":")[0]][o.verdict] += 1
    print(f"\n{len(outcomes)} cases in {time.perf_counter() - start:.0f} s")
    print(f"{'family':<14}" + "".join(f"{c:>11}" for c in CLASSES))
    for family, c in sorted(by_family.items()):
        print(f"{family:<14}" + "".join(f"{c[k]:>11}" for k in CLASSES))
    print(f"{'all':<14}" + "".join(f"{counts[k]:>11}" for k in CLASSES))
    bad = sum(n for k, n in counts.items() if k not in GOOD)
    print(f"findings: {bad} of {len(outcomes)}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
