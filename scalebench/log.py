"""Messages for people, on stderr: the ``logging`` module under the ``scalebench`` logger, and tqdm
progress bars that follow its level.

Every subcommand takes ``-v`` (debug detail too) and ``-q`` (warnings and errors only, no progress
bars); the default shows progress: lines for each phase, and a bar where stderr is a terminal
(``SCALEBENCH_PROGRESS=1`` forces it into a log, ``=0`` turns it off). What a command computes (its tables, rows, JSON) goes to
stdout and is never a log message, so ``-q`` and ``2>/dev/null`` leave it whole and ``--format
json|csv`` stays machine-readable. A line reads ``scalebench <command>: <message>``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

ROOT = "scalebench"


class _Stderr(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a record comes (pytest swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.name.replace('.', ' ')}: {record.getMessage()}"


_handler = _Stderr()
_handler.setFormatter(_Formatter())


def configure(verbose: int = 0, quiet: bool = False) -> None:
    """The level of every scalebench logger: DEBUG with -v, WARNING with -q, else INFO."""
    root = logging.getLogger(ROOT)
    root.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
    if _handler not in root.handlers:
        root.addHandler(_handler)


def get(command: str) -> logging.Logger:
    """The logger of one subcommand (``scalebench plan: ...``)."""
    return logging.getLogger(f"{ROOT}.{command}")


def shows_progress() -> bool:
    """Progress (bars and info lines) is shown unless -q raised the level above INFO."""
    return logging.getLogger(ROOT).isEnabledFor(logging.INFO)


PROGRESS_ENV = "SCALEBENCH_PROGRESS"
"""1: progress bars even where stderr is not a terminal (a log file); 0: never."""


def bars_wanted() -> bool:
    """Bars where stderr is a terminal (a bar's carriage returns make a log or a captured error
    unreadable: the progress lines say enough there), or where SCALEBENCH_PROGRESS=1; never
    with -q or SCALEBENCH_PROGRESS=0."""
    import os

    forced = os.environ.get(PROGRESS_ENV)
    if not shows_progress() or forced == "0":
        return False
    return forced == "1" or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())


def progress_bar(total: int | None, desc: str, unit: str = "it", **kwargs: Any):
    """A tqdm bar on stderr (``bars_wanted``), cleared when it closes."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False,
                disable=not bars_wanted() or total == 0, **kwargs)
