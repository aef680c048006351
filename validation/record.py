"""A validation's record: the calibration and the measurements it compares, and which machine
they describe. Never mix machines.

``<out>/record.json`` and ``<calibration dir>/record.json`` say which machine (real.results.
machine: host, CPU, cores, memory, torch) measured them, when, at which revision, and (the
calibration's) what the rest of the machine did during each launch. ``validate`` then:

- replays a *complete* record (every point measured ``measure.rounds`` times, every calibration
  piece present): it predicts anew and measures nothing, whatever machine runs it, because
  calibration and measurements come from one machine (``--replay`` insists on it: an incomplete
  record is then an error, exit 2);
- resumes an incomplete record measured on this machine (an interrupted run);
- starts anew (calibrates and measures this machine) when an incomplete record comes from
  another machine, or from an unrecorded one: measuring the missing half here and comparing it
  with the other half from there is how `validate --quick` once reported 1,434 % (a calibration
  of 2026-11-22 taken under load average 4-7, against fresh measurements of a quiet machine).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

RECORD_FILE = "record.json"


def read(directory: Path) -> dict[str, Any]:
    try:
        data = json.loads((directory / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write(directory: Path, **fields: Any) -> None:
    from real.results import git_revision, machine
    from sim.fileio import atomic_write_json

    atomic_write_json(directory / RECORD_FILE, {"machine": machine(), "git_revision": git_revision(),
                                                "written": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **fields},
                      strict=False)  # read back by validate: a launch's unknown load is NaN


def same_machine(record: dict[str, Any]) -> bool:
    from real.results import machine

    return bool(record.get("machine")) and record["machine"] == machine()


def describe(record: dict[str, Any]) -> str:
    m = record.get("machine")
    if not m:
        return "an unrecorded machine"
    return (f"{m.get('host')} ({m.get('cpus')} x {m.get('cpu_model')}, {m.get('memory_gib')} GiB, torch "
            f"{m.get('torch')}) at {record.get('git_revision', '?')}, {record.get('written', '?')}")
