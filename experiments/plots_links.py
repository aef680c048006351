"""One detailed iteration's links, tier by tier: utilisation = bytes / (capacity x iteration time),
the share of what each link could carry that it carried (busy time alone called a link 82.5 % busy
whether it carried 195 or 974 MiB).

One panel per tier (gpu ports, NICs, the fabric's cable tiers, a single switch's core), its links
sorted from the busiest, so the panel shows at a glance whether a tier is evenly loaded (a flat
line) or whether a few links carry the iteration (ECMP collisions, a hot uplink). The hottest link
of each tier is named in its panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.plot_style import save_figure  # noqa: E402
from sim.result import LinkStat  # noqa: E402

TIER_ORDER = ("gpu", "nic", "core", "leaf-spine", "rail-spine", "spine-core")


def tiers_of(links: Sequence[LinkStat]) -> list[str]:
    found = {s.tier for s in links}
    return [t for t in TIER_ORDER if t in found] + sorted(found - set(TIER_ORDER))


def link_rows(links: Sequence[LinkStat], iteration_s: float) -> list[dict]:
    """The CSV rows of ``scalebench simulate --links``: one per link that carried bytes."""
    return [{"link": s.name, "tier": s.tier, "capacity_Gbps": s.capacity_Bps * 8 / 1e9, "bytes": s.bytes,
             "utilisation": s.utilisation(iteration_s), "busy_s": s.busy_s, "busy_share": s.busy_share(iteration_s)}
            for s in sorted(links, key=lambda s: (-s.utilisation(iteration_s), -s.busy_s, s.name))]


def plot_link_utilisation(links: Sequence[LinkStat], iteration_s: float, title: str, stem: Path) -> list[Path]:
    tiers = tiers_of(links)
    if not tiers:
        raise ValueError("no link carried bytes (a one-GPU run, or the fast fidelity)")
    fig, axes = plt.subplots(len(tiers), 1, figsize=(7, 1.9 * len(tiers) + 0.6), squeeze=False)
    for ax, tier in zip(axes[:, 0], tiers, strict=True):
        stats = sorted((s for s in links if s.tier == tier), key=lambda s: (-s.utilisation(iteration_s), -s.busy_s))
        util = [100 * s.utilisation(iteration_s) for s in stats]
        ax.plot(range(1, len(util) + 1), util, drawstyle="steps-mid", color="#4c72b0")
        ax.fill_between(range(1, len(util) + 1), util, step="mid", alpha=0.25, color="#4c72b0")
        ax.set_xlim(0.5, max(1.5, len(util) + 0.5))
        ax.set_ylim(0, max(5.0, 1.1 * max(util)))
        ax.set_ylabel("carried\n(% of capacity x iter.)")
        mean = sum(util) / len(util)
        ax.set_title(f"{tier}: {len(util)} links, mean {mean:.1f} %, hottest {stats[0].name} {util[0]:.1f} %",
                     fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("links of the tier, most used first (bytes / (capacity x iteration))")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, stem)
