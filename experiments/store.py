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
        """A finished point ``{row, spec}``; a ConfigError naming the file if it is unreadable."""
        point = self.readable_point(pid)
        if point is None:
            raise ConfigError(str(self.point_path(pid)), "unreadable", "a point file written by `scalebench run` "
                              "(truncated or corrupt: run the experiment again to recompute it)")
        return point

    def readable_point(self, pid: str) -> dict[str, Any] | None:
        """``read_point``, or None when the file is missing, truncated or not a point (a run
        killed by the machine, a disk that filled up): such a point counts as not finished."""
        from sim.fileio import read_input_text

        try:  # bounded: a point file that is a pipe or a device is not a point (ConfigError is a ValueError)
            point = json.loads(read_input_text("point", self.point_path(pid)))
        except (OSError, ValueError):  # ValueError: JSONDecodeError, UnicodeDecodeError
            return None
        if not isinstance(point, dict) or not isinstance(point.get("row"), dict) or not isinstance(point.get("spec"), dict):
            return None
        return point

    def write_meta(self, experiment: Experiment, ids: list[str], skipped: list[Skipped],
                   failed: list[Skipped] | None = None) -> None:
        atomic_write_text(self.path / "experiment.yaml", yaml.safe_dump(experiment.raw, sort_keys=False))
        atomic_write_json(self.path / META_JSON, {
            "name": experiment.name,
            "axes": list(experiment.axes),
            "gpu_axis": experiment.gpu_axis,
            "series_axes": experiment.series_axes,
            "backend": experiment.backend,
            "point_ids": ids,
            "skipped": [{"axes": s.axes, "reason": s.reason} for s in skipped],
            "failed": [{"axes": s.axes, "reason": s.reason} for s in failed or []],
        })

    def meta(self) -> dict[str, Any]:
        path = self.path / META_JSON
        if not path.is_file():
            raise ConfigError("results", str(self.path), "a directory written by `scalebench run` (meta.json missing)")
        from sim.fileio import read_input_text

        try:
            meta = json.loads(read_input_text(str(path), path, what="the JSON `scalebench run` writes"))
        except ConfigError:
            raise
        except (OSError, ValueError) as err:
            raise ConfigError(str(path), "unreadable", f"the JSON `scalebench run` writes ({_reason(err)}); "
                              "run the experiment again to rewrite it") from None
        _check_meta(path, meta)
        return meta

    def experiment_text(self) -> str:
        """experiment.yaml as written (the config as run)."""
        path = self.path / "experiment.yaml"
        from sim.fileio import read_input_text

        try:
            return read_input_text(str(path), path, what="the config `scalebench run` saves")
        except ConfigError:
            raise
        except (OSError, ValueError) as err:
            raise ConfigError(str(path), "unreadable", f"the config `scalebench run` saves ({_reason(err)}); "
                              "run the experiment again to rewrite it") from None

    def experiment_raw(self) -> dict[str, Any]:
        from sim.config import read_yaml

        raw = read_yaml(self.path / "experiment.yaml", what=str(self.path / "experiment.yaml"))
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise ConfigError(str(self.path / "experiment.yaml"), type(raw).__name__, "the mapping `scalebench run` saves")
        return raw

    def rebuild_csv(self, ids: list[str]) -> int:
        """Write results.csv from the finished points among ``ids``, in sweep order; returns rows.
        An unreadable point file counts as not finished (the runner says so and recomputes it)."""
        finished = self.finished_ids()
        points = (self.readable_point(pid) for pid in ids if pid in finished)
        rows = [p["row"] for p in points if p is not None]
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
        """results.csv as a DataFrame; a ConfigError naming the file if it is empty, not a CSV, or
        lacks the columns the plots and tables read (``REQUIRED_COLUMNS``)."""
        import pandas as pd

        if not self.csv_path.is_file():
            raise ConfigError("results", str(self.path), "a directory with results.csv (run `scalebench run` first)")
        try:
            df = pd.read_csv(self.csv_path)
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise ConfigError(str(self.csv_path), "unreadable", f"the CSV `scalebench run` writes ({_reason(err)}); "
                              "run the experiment again to rebuild it") from None
        from experiments.tables import RUN_COLUMN

        required = RUN_REQUIRED_COLUMNS if RUN_COLUMN in df.columns else REQUIRED_COLUMNS
        missing = [c for c in required if c not in df.columns]
        if missing:
            raise ConfigError(str(self.csv_path), f"no column {missing[0]}", "the columns `scalebench run` writes: "
                              + ", ".join(required) + " (run the experiment again to rebuild it)")
        numeric = [c for c in required if c not in ("point_id", "source", "mode")]
        text = [c for c in numeric if len(df) and not pd.api.types.is_numeric_dtype(df[c])]
        if text:
            raise ConfigError(f"{self.csv_path} column {text[0]}", _short(df[text[0]].iloc[0]), "numbers")
        # a row without its size or time, or a column with no number at all, would draw an empty or
        # misplaced plot without a word (issue 29: a results.csv of NaN plotted 'successfully')
        # (a plan point where nothing fits has a row of plan_error and no figures: experiments/plan_points.py)
        failed = df["plan_error"].notna() & (df["plan_error"].astype(str) != "") if "plan_error" in df.columns else \
            pd.Series(False, index=df.index)
        for c in numeric:
            finite = df[c].map(lambda v: isinstance(v, (int, float)) and v == v and abs(v) != float("inf")) | failed
            if len(df) and not failed.all() and (not finite[~failed].any() or (c in KEY_COLUMNS and not finite.all())):
                row = int((~finite).to_numpy().nonzero()[0][0])
                value = df[c].iloc[row]
                raise ConfigError(f"{self.csv_path} column {c} row {row + 1}",
                                  _short(value.item() if hasattr(value, "item") else value),
                                  "a finite number (run the experiment again to rebuild it)")
        return df


REQUIRED_COLUMNS = ("point_id", "source", "world_size", "iteration_time_s", "throughput_samples_per_s", "speedup",
                    "scaling_efficiency", "compute_time_s", "exposed_comm_time_s")
"""What the plots and tables of one-iteration points read (experiments/plots.py, tables.py)."""
RUN_REQUIRED_COLUMNS = ("point_id", "source", "world_size", "mode", "iterations", "samples_per_s",
                        "effective_samples_per_s", "staleness_mean", "staleness_p95", "wall_time_s", "lost_work_s",
                        "restarts")
"""What the plots and tables of multi-iteration runs read (experiments/plots_runs.py, tables.py)."""
KEY_COLUMNS = ("world_size", "iteration_time_s", "wall_time_s")
"""Columns every row needs as a finite number (its size and its time); the others may be NaN in some
rows (not measured), never in all of them."""
META_LISTS = ("axes", "series_axes")


def _check_meta(path: Path, meta: Any) -> None:
    if not isinstance(meta, dict):
        raise ConfigError(str(path), type(meta).__name__, "the mapping `scalebench run` writes (name, axes, ...)")
    if not isinstance(meta.get("name"), str):
        raise ConfigError(f"{path} name", meta.get("name"), "the experiment's name (run the experiment again)")
    for key in META_LISTS:
        value = meta.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path} {key}", value, "a list of axis names (run the experiment again)")
    for key in ("skipped", "failed"):
        listed = meta.get(key, [])
        if not isinstance(listed, list) or not all(isinstance(s, dict) and {"axes", "reason"} <= set(s) for s in listed):
            raise ConfigError(f"{path} {key}", _short(listed), "a list of {axes, reason} (run the experiment again)")


def _reason(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return f"{type(err).__name__}: {text}"[:160]


def _short(value: Any, limit: int = 60) -> Any:
    text = repr(value)
    return value if len(text) <= limit else text[: limit - 3] + "..."
