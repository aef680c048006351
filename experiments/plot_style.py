"""What keeps a plot readable at a glance, shared by the experiment plots.

- equal series stay visible where they coincide: each has its own marker shape, and each later
  series' markers are smaller than the one before (``marker_sizes``), so coinciding points show as
  nested markers; a point is never shifted off its GPU count (a sideways offset put 10 GbE points
  above the ideal line at 2-4 GPUs: it read as superlinear);
- end labels never collide: ``label_ends`` stacks them in the right margin at least one line
  apart, each with a thin leader to the point it names;
- powers of two read as numbers (1, 2, 4 ... 1024, and 1/2, 1/4 below one), not 2^k;
- legends sit below the axes, off the data, and list only what was drawn.
"""

from __future__ import annotations

import io
from fractions import Fraction
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from sim.fileio import atomic_write_bytes

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
"""One marker shape per series (cycled), so series stay apart where their colours are close."""


def series_colors(n: int) -> list[Any]:
    """``n`` distinct colours: tab10 up to 10 series, tab20 beyond."""
    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def panel_legend(axes) -> tuple[list[Any], list[str]]:
    """Every panel's legend entries once each (a line may be missing from some panels)."""
    seen: dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


def marker_sizes(n: int, largest: float = 10.0, smallest: float = 4.0) -> list[float]:
    """Marker sizes (points) for ``n`` series drawn in this order at the same positions: from
    ``largest`` down to ``smallest`` in equal steps, so each marker rings the next one drawn on it."""
    if n <= 1:
        return [largest * 0.8] * n
    step = (largest - smallest) / (n - 1)
    return [largest - i * step for i in range(n)]


def power_of_two_label(value: float, _pos: Any = None) -> str:
    if value >= 1:
        return f"{value:g}"
    frac = Fraction(value).limit_denominator(1 << 20)
    return f"{frac.numerator}/{frac.denominator}"


def log2_axis(ax, axis: str, lo: float, hi: float) -> None:
    """A log-2 axis from ``lo`` to ``hi`` with ticks at the powers of two in between, labelled 1, 2,
    4 ... (and 1/2, 1/4 ... below one), and no minor ticks."""
    import math

    get = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log", base=2)
    first, last = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    every = max(1, math.ceil((last - first + 1) / 12))  # at most about a dozen labels
    ticks = [2.0**k for k in range(first, last + 1) if (k - first) % every == 0]
    get.set_major_locator(FixedLocator(ticks))
    get.set_major_formatter(FuncFormatter(power_of_two_label))
    get.set_minor_locator(NullLocator())


def label_ends(ax, items: list[tuple[float, float, str, Any]], fontsize: float = 8) -> None:
    """Labels for series ends, (x, y, text, colour) in data coordinates, in the right margin:
    stacked at least one line apart (never overlapping), each joined to its point by a leader."""
    if not items:
        return
    fig = ax.figure
    fig.canvas.draw()  # the final limits and scales: label positions follow them
    to_axes = ax.transAxes.inverted()
    height_px = ax.get_window_extent().height
    gap = 1.25 * fontsize * fig.dpi / 72 / height_px  # one line, in axes fractions
    placed = sorted(((to_axes.transform(ax.transData.transform((x, y)))[1], x, y, text, color)
                     for x, y, text, color in items), key=lambda item: item[0])
    ys = [p[0] for p in placed]
    for i in range(1, len(ys)):  # push up to keep one line between neighbours
        ys[i] = max(ys[i], ys[i - 1] + gap)
    overflow = ys[-1] - 1.0
    if overflow > 0:  # shift everything down, not below the bottom
        ys = [max(y - overflow, i * gap) for i, y in enumerate(ys)]
    for y_axes, (_, x, y, text, color) in zip(ys, placed, strict=True):
        ax.text(1.02, y_axes, text, transform=ax.transAxes, fontsize=fontsize, color=color, va="center",
                clip_on=False)
        ax.annotate("", xy=(x, y), xycoords="data", xytext=(1.015, y_axes), textcoords="axes fraction",
                    annotation_clip=False, arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.5,
                                                       "alpha": 0.6, "shrinkA": 0, "shrinkB": 2})


def legend_below(ax, ncol: int = 2, fontsize: float = 8, y: float = -0.14) -> None:
    """The axes' legend under the x-axis label, off the data; entries without a label are left out."""
    handles, labels = ax.get_legend_handles_labels()
    kept = [(h, lab) for h, lab in zip(handles, labels, strict=True) if lab and not lab.startswith("_")]
    if kept:
        ax.legend(*zip(*kept, strict=True), fontsize=fontsize, loc="upper center", bbox_to_anchor=(0.5, y),
                  ncol=min(ncol, len(kept)), frameon=False)


FORMATS = ("png", "svg")


def save_figure(fig, stem: Path) -> list[Path]:
    """Write ``fig`` as stem.png and stem.svg (each atomically) and close it. SVG text stays text
    (searchable, smaller); a fixed hash salt and no date make the SVG reproducible."""
    import matplotlib.pyplot as plt

    written = []
    for fmt in FORMATS:
        buf = io.BytesIO()
        with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "scalebench"}):
            fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
        written.append(atomic_write_bytes(stem.with_suffix(f".{fmt}"), buf.getvalue()))
    plt.close(fig)
    return written
