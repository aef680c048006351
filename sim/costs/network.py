"""Point-to-point transfer cost."""

from __future__ import annotations

from sim.catalog import Link


def message_time_s(n_bytes: float, link: Link, load: float = 1.0) -> float:
    """Alpha-beta with sharing: t = alpha + S x load / (B x efficiency).

    alpha = hardware + software latency of one message; ``load`` is how many equal flows share
    the busiest link on the path (max-min fair share B/k, as SimGrid's LMM and ASTRA-sim's
    congestion-aware backend model it). Calculon's network line, with a sharing factor.
    """
    return link.alpha_s + n_bytes * load / link.effective_Bps


def transfer_time_s(n_bytes: float, link: Link, load: float = 1.0) -> float:
    """The bandwidth part alone, for pipelined steps whose latency is paid elsewhere."""
    return n_bytes * load / link.effective_Bps
