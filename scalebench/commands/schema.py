"""scalebench schema [scenario|experiment]: the JSON Schema of a config file, for editors.

Generated from the parsers' own key tuples and registries (sim/schema.py, experiments/schema.py).
VS Code (the YAML extension): ``# yaml-language-server: $schema=experiment.schema.json`` on a
config's first line, after ``scalebench schema experiment -o experiment.schema.json``.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", nargs="?", choices=("experiment", "scenario"), default="experiment",
                        help="experiment (default: the file of `scalebench run`) or scenario (`scalebench simulate`)")
    parser.add_argument("-o", "--out", metavar="FILE.json", help="write it here (default: standard output)")


def run(args: argparse.Namespace) -> int:
    if args.out:
        from sim.fileio import check_writable

        check_writable("-o", args.out)
    if args.kind == "scenario":
        from sim.schema import scenario_schema

        schema = scenario_schema()
    else:
        from experiments.schema import experiment_schema

        schema = experiment_schema()
    text = json.dumps(schema, indent=1, allow_nan=False) + "\n"
    if args.out:
        from sim.fileio import atomic_write_text

        atomic_write_text(args.out, text)
        print(f"{args.kind} schema -> {args.out}")
    else:
        sys.stdout.write(text)
    return 0
