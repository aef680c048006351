"""A result directory: ``results/<name>/``.

    experiment.yaml      the config as run
    meta.json            axes, series axes, the invalid combinations left out and why
    points/<id>.json     one finished point each (row + resolved spec), written atomically
    results.csv          one row per point of the current config, rebuilt atomically from points/
    plots/               PNG and SVG, written by ``scalebench plot``

Points are the unit of persistence: an interrupted sweep keeps every finished point and the
next run only computes the missing ones.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from experiments.config import Experiment, Skipped
from sim.errors import ConfigError
from sim.fileio import atomic_write, atomic_write_json, atomic_write_text

RESULTS_CSV = "results.csv"
META_JSON = "meta.json"
POINTS_DIR = "points"
LEADING_COLUMNS = ("point_id", "source", "repetition")


class ResultDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    @property
    def points_dir(self) -> Path:
        return self.path / POINTS_DIR

    @property
    def csv_path(self) -> Path:
        return self.path / RESULTS_CSV

    @property
    def plots_dir(self) -> Path:
        return self.path / "plots"

    def point_path(self, pid: str) -> Path:
        return self.points_dir / f"{pid}.json"

    def finished_ids(self) -> set[str]:
        if not self.points_dir.is_dir():
            return set()
        return {p.stem for p in self.points_dir.glob("*.json")}

    def write_point(self, pid: str, row: dict[str, Any], spec: dict[str, Any]) -> None:
        atomic_write_json(self.point_path(pid), {"row": row, "spec": spec})

    def read_point(self, pid: str) -> dict[str, Any]:
        return json.loads(self.point_path(pid).read_text(encoding="utf-8"))

    def write_meta(self, experiment: Experiment, ids: list[str], skipped: list[Skipped]) -> None:
        atomic_write_text(self.path / "experiment.yaml", yaml.safe_dump(experiment.raw, sort_keys=False))
        atomic_write_json(self.path / META_JSON, {
            "name": experiment.name,
            "axes": list(experiment.axes),
            "gpu_axis": experiment.gpu_axis,
            "series_axes": experiment.series_axes,
            "backend": experiment.backend,
            "point_ids": ids,
            "skipped": [{"axes": s.axes, "reason": s.reason} for s in skipped],
        })

    def meta(self) -> dict[str, Any]:
        path = self.path / META_JSON
        if not path.is_file():
            raise ConfigError("results", str(self.path), "a directory written by `scalebench run` (meta.json missing)")
        return json.loads(path.read_text(encoding="utf-8"))

    def rebuild_csv(self, ids: list[str]) -> int:
        """Write results.csv from the finished points among ``ids``, in sweep order; returns rows."""
        finished = self.finished_ids()
        rows = [self.read_point(pid)["row"] for pid in ids if pid in finished]
        columns: list[str] = list(LEADING_COLUMNS)
        for row in rows:
            columns += [c for c in row if c not in columns]

        def write(fh):
            writer = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)

        atomic_write(self.csv_path, write)
        return len(rows)

    def read_csv(self):
        import pandas as pd

        if not self.csv_path.is_file():
            raise ConfigError("results", str(self.path), "a directory with results.csv (run `scalebench run` first)")
        return pd.read_csv(self.csv_path)
