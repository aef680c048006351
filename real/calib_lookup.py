"""Looking a calibrated figure up: the nearest measured world size of a calibration file, and
values between measured points (torch-free; real/microbench.py, real/codec_bench.py,
real/stall_bench.py and real/pipeline_bench.py write the files these read)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def nearest_world_size(path: Path, ranks: int) -> tuple[int, dict[str, Any]] | None:
    """(k, entry) of a calibration file's ``world_sizes`` at the measured k nearest ``ranks``
    (ties to the larger k); None when the file or its entries are missing."""
    if not path.exists():
        return None
    sizes = {int(k): v for k, v in (yaml.safe_load(path.read_text()) or {}).get("world_sizes", {}).items()}
    if not sizes:
        return None
    nearest = min(sizes, key=lambda k: (abs(k - ranks), -k))
    return nearest, sizes[nearest]


def piecewise_linear(points: list[tuple[float, float]], x: float) -> float:
    """y(x) through sorted (x, y) points, linear between them, held beyond the first and the last."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * ((x - x0) / (x1 - x0)) if x1 > x0 else y1
    return points[-1][1]
