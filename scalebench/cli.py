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
    "explain": ("scalebench.commands.explain", "where a predicted iteration goes, term by term, beside a measured one"),
    "plan": ("scalebench.commands.plan", "search the best layout, library, codec and GPU count to train a model on a cluster"),
    "collective": ("scalebench.commands.collective", "predict one collective over sizes, in nccl-tests' columns"),
    "bench": ("scalebench.commands.bench", "time the simulator itself at 64 to 16,384 GPUs"),
    "run": ("scalebench.commands.run", "run an experiment (a sweep) into results/<name>/ and plot it"),
    "plot": ("scalebench.commands.plot", "draw an experiment's plots (PNG and SVG) from results/<name>/"),
    "regress": ("scalebench.commands.regress", "check scaling efficiency against the committed baselines"),
    "report": ("scalebench.commands.report", "one self-contained HTML or markdown page of an experiment"),
    "calibrate": ("scalebench.commands.calibrate", "measure this machine and write a calibration the simulator loads"),
    "real": ("scalebench.commands.real", "run a scenario for real with torch.distributed (gloo/NCCL) and measure it"),
    "validate": ("scalebench.commands.validate", "measure a sweep for real, predict it calibrated, report the error"),
    "schema": ("scalebench.commands.schema", "print the JSON Schema of the experiment or scenario file (for editors)"),
    "list": ("scalebench.commands.listing", "list models, gpus, links or codecs with their figures and sources"),
    "layers": ("scalebench.commands.layers", "derive the layer table of your own torch model (MODULE:CALLABLE) for layers_file"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, no usage dump; the subcommand named when there is one
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="scalebench", description="Simulate and measure how distributed deep-learning training scales.",
                     allow_abbrev=False)  # one spelling per flag: --gpu is not --gpus
    parser.add_argument("--version", action="version", version=f"scalebench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    messages = argparse.ArgumentParser(add_help=False)
    verbosity = messages.add_argument_group("messages (stderr; the results on stdout are unchanged)")
    verbosity.add_argument("-v", "--verbose", action="count", default=0,
                           help="more detail on stderr (debug messages)")
    verbosity.add_argument("-q", "--quiet", action="store_true",
                           help="only warnings and errors on stderr: no progress bars or progress lines"
                                " (regress: also only the points that are not OK)")
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False, parents=[messages])
        p.set_defaults(_module=module)
        # Argument definitions are cheap modules; heavy imports happen inside run().
        importlib.import_module(module).add_arguments(p)
    return parser


EXIT_OK = 0
EXIT_FAILED = 1
"""A check failed (regress or validate beyond tolerance, collectives with wrong results), a
measured run failed, or the machine refused (a full disk): the message says which."""
EXIT_BAD_INPUT = 2
"""Bad input: one line naming the field and what is allowed (argparse's own errors too)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as shells report it)."""
EXIT_BROKEN_PIPE = 141
"""The reader of stdout went away (``| head``): 128 + SIGPIPE, what other Unix tools exit with."""
EXIT_INCONCLUSIVE = 3
"""``validate`` only: the machine was too busy or too noisy to judge the model (validation/noise.py)."""
EXIT_HANGUP = 129
"""SIGHUP (128 + 1): the terminal went away; cleaned up as after Ctrl-C (``Terminated``)."""
EXIT_TERMINATED = 143
"""SIGTERM (128 + 15): cleaned up as after Ctrl-C (``Terminated``)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised like Ctrl-C so that every cleanup Ctrl-C runs runs too (ranks
    killed, temporary directories and namespaces removed, finished points kept)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    import signal

    signal.signal(signum, signal.SIG_IGN)  # a second signal must not interrupt the cleanup
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    import signal

    _reopen_closed_streams()
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already printed on one line
        return done.code if isinstance(done.code, int) else EXIT_OK
    if extra:  # a flag of another command (real has no --gpu): said by the command it was given to
        print(f"scalebench {args.command}: error: unrecognized arguments: {' '.join(extra)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    empty = _empty_value(parser, args)
    if empty is not None:
        print(f"scalebench {args.command}: error: {empty[0]}: got {empty[1]!r}; allowed: a non-empty value (an empty "
              "string would be taken as the flag not given)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if _STDOUT_CLOSED:
        print(f"scalebench {args.command}: error: stdout: got 'closed'; allowed: an open standard output (redirect "
              "it to a file or to /dev/null instead of closing it: >&- leaves nowhere to print)", file=sys.stderr)
        return EXIT_BAD_INPUT
    from scalebench import log

    log.configure(verbose=getattr(args, "verbose", 0), quiet=getattr(args, "quiet", False))
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        module = importlib.import_module(args._module)
        return int(module.run(args) or 0)
    except ConfigError as err:
        print(f"scalebench {args.command}: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Terminated as err:
        print(f"scalebench {args.command}: terminated ({signal.Signals(err.signum).name})", file=sys.stderr)
        return 128 + err.signum
    except KeyboardInterrupt:
        print(f"scalebench {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as err:  # not the input's fault (bad paths are ConfigErrors): a full disk, an I/O error
        print(f"scalebench {args.command}: error: {os_error_text(err)}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _empty_value(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, str] | None:
    """The first flag (or positional) given an empty or blank string: ``--trace ''`` wrote nothing,
    ``-o ''`` printed to stdout, ``--results ''`` wrote into the current directory, without a word."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[args.command]._actions:
        value = getattr(args, action.dest, None)
        values = value if isinstance(value, list) else [value]
        blank = next((v for v in values if isinstance(v, str) and not v.strip()), None)
        if blank is not None:
            return (action.option_strings[-1] if action.option_strings else action.dest.upper()), blank
    return None


def os_error_text(err: OSError) -> str:
    """An OSError on one line, the file first: 'results/x.json: No space left on device (ENOSPC)'."""
    import errno

    code = f" ({errno.errorcode[err.errno]})" if err.errno in errno.errorcode else ""
    what = f"{err.strerror}{code}" if err.strerror else str(err)
    text = f"{err.filename}: {what}" if err.filename else what
    return " ".join(text.split())


_STDOUT_CLOSED = False
"""Standard output was closed when scalebench started (``>&-``): every command refuses to run."""


def _reopen_closed_streams() -> None:
    """A closed stdout or stderr (``scalebench list links >&-``) leaves sys.stdout None (or writing
    into nothing), and the first print a traceback: put /dev/null on the descriptor, so that nothing
    else lands there (a file the command opens next would get descriptor 1), and remember that
    stdout was closed; a closed stderr stays quiet (there is nowhere to say anything)."""
    import os

    global _STDOUT_CLOSED
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            if getattr(sys, name) is not None:
                continue
        except OSError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
        setattr(sys, name, open(fd, "w", encoding="utf-8", errors="replace", closefd=False))  # noqa: SIM115
        if fd == 1:
            _STDOUT_CLOSED = True


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
