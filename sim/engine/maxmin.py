"""Max-min fair rates by progressive filling (water-filling).

Raise the rates of all unfrozen flows together, freeze the flows of the link that saturates first
at that link's fair share, and repeat (Bertsekas & Gallager, *Data Networks*, 2nd ed., sec. 6.5.2;
SimGrid's LMM solves the same problem). Two forms of one algorithm:
- ``max_min_rates``: over dicts of live flows, for the event engine's few flows per component;
- ``max_min_arrays``: numpy over a flow x link incidence (CSR), for the periodic engine's whole
  rings at once (tens of thousands of flows, a few rounds each).
Each also says which link froze each flow: its bottleneck, the link that delayed it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

TIE_RTOL = 1e-12
"""Links whose fair shares are within this (relative) of the smallest freeze in the same round."""


def max_min_rates(flows: dict[int, Any], capacity_Bps: Sequence[float], on_link: Sequence[dict[int, Any]],
                  links: dict[int, None]) -> dict[int, tuple[float, int]]:
    """(rate, bottleneck link) of every flow in ``flows``; ``links`` hold every link of every flow
    and ``on_link[l]`` the flows on link l (objects with a ``path``).

    Each round gives the unfrozen flows of the tightest links (least remaining capacity per
    unfrozen flow) that fair share and removes it from every link they cross.
    """
    spare = {link: capacity_Bps[link] for link in links}
    unfrozen_on = {link: len(on_link[link]) for link in links}
    rates: dict[int, tuple[float, int]] = {}
    while len(rates) < len(flows):
        share = min(spare[link] / unfrozen_on[link] for link in links if unfrozen_on[link] > 0)
        share = max(share, 0.0)
        limit = share * (1.0 + TIE_RTOL)
        tight = [link for link in links if unfrozen_on[link] > 0 and spare[link] / unfrozen_on[link] <= limit]
        for link in tight:
            for fid, f in on_link[link].items():
                if fid in rates:
                    continue
                rates[fid] = (share, link)
                for other in f.path:
                    spare[other] -= share
                    unfrozen_on[other] -= 1
        if share == 0.0:
            raise RuntimeError("a link's capacity is exhausted: max-min sharing found a zero rate")
    return rates


def max_min_arrays(flow_ptr: np.ndarray, flow_links: np.ndarray, capacity_Bps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rate, bottleneck link) per flow; flow f crosses ``flow_links[flow_ptr[f]:flow_ptr[f+1]]``.
    The same rates as ``max_min_rates`` (tests/test_periodic.py)."""
    n_flows = len(flow_ptr) - 1
    lengths = np.diff(flow_ptr)
    if n_flows == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    if (lengths == 0).any():
        raise ValueError("every flow crosses at least one link")
    flow_of = np.repeat(np.arange(n_flows), lengths)
    starts = flow_ptr[:-1]
    spare = capacity_Bps.astype(float).copy()
    unfrozen = np.bincount(flow_links, minlength=len(spare)).astype(float)
    rate = np.full(n_flows, np.nan)
    neck = np.full(n_flows, -1, dtype=np.int64)
    frozen = np.zeros(n_flows, dtype=bool)
    while not frozen.all():
        live = unfrozen > 0
        shares = np.full(len(spare), np.inf)
        shares[live] = spare[live] / unfrozen[live]
        # Shares only rise as the water level rises (a flow frozen at the lowest share s takes s
        # from links whose share is >= s), so a link whose share is the lowest on every path
        # through it saturates at that share: its flows freeze now, whatever happens elsewhere.
        # The same rates as freezing one global minimum per round, in far fewer rounds.
        on_path = shares[flow_links]
        flow_min = np.minimum.reduceat(on_path, starts)
        flow_min[frozen] = np.inf
        seen_min = np.full(len(spare), np.inf)
        np.minimum.at(seen_min, flow_links, flow_min[flow_of])
        local = live & (shares <= seen_min * (1.0 + TIE_RTOL))
        hit = np.zeros(n_flows, dtype=bool)
        hit[flow_of[local[flow_links]]] = True
        hit &= ~frozen
        if not hit.any():  # rounding left no local minimum: take the global one
            hit = (~frozen) & (flow_min <= flow_min.min() * (1.0 + TIE_RTOL))
        if (flow_min[hit] <= 0.0).any():
            raise RuntimeError("a link's capacity is exhausted: max-min sharing found a zero rate")
        rate[hit] = flow_min[hit]
        at_min = hit[flow_of] & (on_path <= flow_min[flow_of] * (1.0 + TIE_RTOL))
        first = np.full(n_flows, -1, dtype=np.int64)
        for candidates in (at_min, at_min & local[flow_links]):  # a saturating link wins
            idx = np.nonzero(candidates)[0][::-1]  # the first such link of the path
            first[flow_of[idx]] = flow_links[idx]
        neck[hit] = first[hit]
        frozen |= hit
        members = hit[flow_of]
        np.subtract.at(spare, flow_links[members], rate[flow_of[members]])
        np.subtract.at(unfrozen, flow_links[members], 1.0)
    return rate, neck
