"""The calibration's collective fits as catalog links: one gloo link per measured (collective,
link setting, world size), ``gloo_<link>_n<n>``, because gloo picks its own algorithm per rank
count and a shared tbf divides one rate among all ranks: a ring with 2(n-1) steps does not
carry a 2-rank fit to 4 ranks (DESIGN.md, observed). Torch-free; read by the validation's
predictions (validation/calib.py, validation/points.py) and by real/pipeline_bench.py's fit.
"""

from __future__ import annotations

from typing import Any

from sim.calibration import Calibration
from sim.catalog import Catalog, load_catalog_file
from sim.errors import ConfigError

FIT_COLLECTIVE = {"allreduce": "allreduce", "allgather": "allgather", "sendrecv": "sendrecv"}


def link_name(link: str, ranks: int, collective: str = "allreduce") -> str:
    suffix = "" if collective == "allreduce" else f"_{collective}"
    return f"gloo_{link}_n{ranks}{suffix}"


def _fits(cal: Calibration) -> list[dict[str, Any]]:
    return [f for f in (cal.links.get("fits") or []) if f.get("backend", "gloo") == "gloo"]


def _comm_rows(cal: Calibration) -> list[dict[str, Any]]:
    import csv

    path = cal.path / "comm.csv"
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as fh:
        return [r for r in csv.DictReader(fh) if r.get("time_s") and r.get("wrong") in ("0", "0.0")]


def link_entries(cal: Calibration) -> dict[str, dict[str, Any]]:
    """Catalog link entries, one per measured (collective, link setting, world size): the
    two-regime fit of the raw microbenchmarks (comm.csv) where there are enough sizes, else
    the calibration's own fit; both mapped onto the simulator's closed form at that n."""
    from sim.fit import AlphaBeta, link_parameters, two_regime_fit

    out = {}
    for f in _fits(cal):
        n, link, collective = int(f["world_size"]), f["link"], f["collective"]
        rows = [r for r in _comm_rows(cal) if r["collective"] == collective and int(r["world_size"]) == n
                and r.get("link", "loopback") == link]
        fit = two_regime_fit([float(r["size_bytes"]) for r in rows], [float(r["time_s"]) for r in rows])
        if fit is None:
            latency_us, bandwidth_GBps, how = float(f["link_latency_us"]), float(f["link_bandwidth_GBps"]), \
                f"relative-error fit (rms {float(f['rms_relative_error']):.2f})"
        else:
            a_s, b_Bps = link_parameters(AlphaBeta(alpha_s=fit[0], bandwidth_Bps=fit[1], rms_relative_error=0.0,
                                                   points=len(rows)), collective, n)
            latency_us, bandwidth_GBps, how = a_s * 1e6, b_Bps / 1e9, "two-regime fit (real/calibrated_links.py)"
        out[link_name(link, n, collective)] = {
            "kind": "loopback", "bandwidth_GBps": bandwidth_GBps, "latency_us": 0,
            "software_latency_us": latency_us, "efficiency": 1.0,
            "source": f"scalebench calibrate: gloo {collective} on {n} ranks, link {link}, t = alpha + S/B, "
                      f"{how}, mapped onto the simulator's closed form"}
    return out


def fitted_ranks(cal: Calibration, link: str, collective: str = "allreduce") -> list[int]:
    return sorted({int(f["world_size"]) for f in _fits(cal) if f["link"] == link and f["collective"] == collective})


def link_for(cal: Calibration, link: str, ranks: int, collective: str = "allreduce") -> str:
    """The catalog link for ``ranks`` on ``link``: the fit at that world size, else the nearest one."""
    have = fitted_ranks(cal, link, collective)
    if not have:
        raise ConfigError("calibration.links", link, f"a link the calibration measured with {collective} "
                          f"(run scalebench validate --recalibrate, or add {link} to calibration.links)")
    nearest = min(have, key=lambda k: (abs(k - ranks), -k))
    return link_name(link, nearest, collective)


def calibrated_catalog(cal: Calibration) -> Catalog:
    """The built-in catalog + the calibration's device and its per-(link, n) gloo links."""
    base = load_catalog_file(cal.catalog_file) if cal.catalog_file.exists() else None
    extra = {"links": link_entries(cal)}
    if base is None:
        from sim.catalog import builtin_catalog

        base = builtin_catalog()
    return base.extended(extra, where=str(cal.path / "links.yaml"))
