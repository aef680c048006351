"""The CLI shows its vocabulary: help on every flag with its allowed values, `scalebench list`,
byte sizes as 256M / 1G through one parser, each command taking only its flags, one spelling each."""

from __future__ import annotations

import argparse
import json

import pytest

from scalebench.cli import build_parser, main
from scalebench.commands.common import SCENARIO_FLAGS
from sim.catalog import builtin_catalog
from sim.codecs import CODECS
from sim.errors import ConfigError
from sim.strategy import COLLECTIVES, PRECISIONS
from sim.units import parse_bytes
from sim.workload import load_workload, zoo_names


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flags(sub: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in sub._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


def test_every_flag_of_every_command_has_help():
    for name, sub in _subparsers().items():
        for action in sub._actions:
            if "-h" in action.option_strings:
                continue
            assert action.help and len(action.help) > 8, (name, action.option_strings or action.dest)


def test_one_spelling_per_flag():
    """No flag has a second long name, and no two flags of a command write the same setting."""
    for name, sub in _subparsers().items():
        actions = [a for a in sub._actions if a.option_strings and "-h" not in a.option_strings]
        for action in actions:
            assert len([s for s in action.option_strings if s.startswith("--")]) == 1, (name, action.option_strings)
        dests = [a.dest for a in actions]
        assert len(dests) == len(set(dests)), (name, sorted(d for d in dests if dests.count(d) > 1))


@pytest.mark.parametrize("flag,values", [
    ("--collective", COLLECTIVES), ("--precision", PRECISIONS), ("--codec", list(CODECS)),
    ("--gpu", list(builtin_catalog().gpus)), ("--inter-link", list(builtin_catalog().links)),
    ("--model", list(zoo_names())),
])
def test_simulate_help_names_the_allowed_values(flag, values):
    text = _flags(_subparsers()["simulate"])[flag].help
    assert all(v in text for v in values), (flag, text)


def test_simulate_and_real_take_only_the_flags_that_apply():
    subs = _subparsers()
    simulate, real = set(_flags(subs["simulate"])), set(_flags(subs["real"]))
    for flag, (*_, commands) in SCENARIO_FLAGS.items():
        if flag == "backend":  # the simulated collective library; real has its own --backend, the process group's
            continue
        option = "--" + flag.replace("_", "-")
        assert (option in simulate) == ("simulate" in commands) and (option in real) == ("real" in commands), option
    assert {"--gpu", "--intra-link", "--inter-link", "--fidelity", "--catalog"} <= simulate - real  # a measurement is this machine's
    assert {"--strategy", "--link", "--threads", "--comm", "--max-bytes"} <= real - simulate
    assert not {"--nproc", "--workload", "--microbatches", "--compression"} & real  # second spellings are gone


@pytest.mark.parametrize("argv", [
    ["simulate", "--strategy", "ddp"], ["simulate", "--link", "1gbit"], ["real", "--fidelity", "detailed"],
    ["real", "--gpu", "h100"], ["real", "--catalog", "x.yaml"],
])
def test_a_flag_of_the_other_command_is_a_one_line_error(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unrecognized arguments" in err[0]


@pytest.mark.parametrize("text,n_bytes", [
    ("65536", 65536), (4096, 4096), ("256M", 256 * 2**20), ("1G", 2**30), ("64KiB", 65536), ("1.5G", 3 * 2**29),
    ("2 MiB", 2 * 2**20), ("8", 8),
])
def test_sizes_parse_with_binary_suffixes(text, n_bytes):
    assert parse_bytes("x", text) == n_bytes


@pytest.mark.parametrize("text", ["1e", "-1", "1.5", "inf", "nan", True, None, "M", "0"])
def test_bad_sizes_name_the_field(text):
    with pytest.raises(ConfigError) as err:
        parse_bytes("network.max_bytes", text)
    assert err.value.field == "network.max_bytes" and "256K" in err.value.allowed


def test_every_byte_flag_takes_sizes():
    args = build_parser().parse_args(["calibrate", "--max-bytes", "256M"])
    assert args.max_bytes == 256 * 2**20
    assert build_parser().parse_args(["real", "--comm", "--max-bytes", "1G"]).max_bytes == 2**30


def test_validation_config_takes_sizes(tmp_path):
    from validation.config import load_validation_config

    text = (tmp_path / "v.yaml")
    text.write_text("threshold: {mape_percent: 10}\nnetwork: {min_bytes: 2K, max_bytes: 4M}\n"
                    "sweeps: [{model: mlp, ranks: 2, strategy: ddp, overlap: true, bucket_mib: 25, codec: fp32, "
                    "link: loopback, microbatches: 1}]\n")
    try:
        cfg = load_validation_config(text)
    except ConfigError as err:  # the sweep axes are validation's business; only the sizes matter here
        assert "bytes" not in err.field, err
        pytest.skip(f"validation sweep axes changed: {err}")
    assert (cfg.network["min_bytes"], cfg.network["max_bytes"]) == (2048, 4 * 2**20)


@pytest.mark.parametrize("kind", ["models", "gpus", "links", "codecs"])
def test_list_shows_every_entry_with_figures_and_source(kind, capsys):
    assert main(["list", kind, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    expected = {"models": zoo_names(), "gpus": builtin_catalog().gpus, "links": builtin_catalog().links,
                "codecs": CODECS}[kind]
    assert [r["name"] for r in rows] == sorted(expected) if kind != "codecs" else list(expected)
    assert all(r["source"] for r in rows)
    if kind == "models":
        assert all(r["params"] == load_workload(r["name"]).param_count for r in rows)
    assert main(["list", kind]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[0] == "name" and len(table) == len(rows) + 1


def test_list_takes_a_calibration_catalog(tmp_path, capsys):
    extra = tmp_path / "c.yaml"
    extra.write_text("links: {my_link: {kind: roce, bandwidth_Gbps: 50, latency_us: 3, efficiency: 0.9, source: mine}}\n")
    assert main(["list", "links", "--catalog", str(extra), "--format", "csv"]) == 0
    assert "my_link,roce,6.25,50.0,0.9,3.0" in capsys.readouterr().out
