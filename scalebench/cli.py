"""The ``scalebench`` command. Each subcommand is a module with ``add_arguments`` and ``run``.

Modules are imported only when their subcommand runs, so ``scalebench simulate`` never
imports torch. Bad input (a ``ConfigError``) prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from scalebench import __version__
from sim.errors import ConfigError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, one-line help)
    "simulate": ("scalebench.commands.simulate", "simulate one training iteration and print its breakdown"),
    "collective": ("scalebench.commands.collective", "predict one collective over sizes, in nccl-tests' columns"),
    "bench": ("scalebench.commands.bench", "time the simulator itself at 64 to 16,384 GPUs"),
    "run": ("scalebench.commands.run", "run an experiment (a sweep) into results/<name>/ and plot it"),
    "plot": ("scalebench.commands.plot", "draw an experiment's plots (PNG and SVG) from results/<name>/"),
    "regress": ("scalebench.commands.regress", "check scaling efficiency against the committed baselines"),
    "report": ("scalebench.commands.report", "one self-contained HTML or markdown page of an experiment"),
    "calibrate": ("scalebench.commands.calibrate", "measure this machine and write a calibration the simulator loads"),
    "real": ("scalebench.commands.real", "run a scenario for real with torch.distributed (gloo/NCCL) and measure it"),
    "validate": ("scalebench.commands.validate", "measure a sweep for real, predict it calibrated, report the error"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump
        self.exit(2, f"scalebench: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scalebench", description="Simulate and measure how distributed deep-learning training scales.")
    parser.add_argument("--version", action="version", version=f"scalebench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        # Argument definitions are cheap modules; heavy imports happen inside run().
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except ConfigError as err:
        print(f"scalebench {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"scalebench {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
