"""nccl-tests logs fitted into catalog links (``scalebench calibrate --from-nccl-tests``).

The prediction a fit adjusts is the catalog's: NCCL's own model of the run (sim/costs/backends/nccl.py:
its tuner picks ring, tree or NVLS and LL, LL128 or Simple by size, the links set the time) on the
cluster the log describes (its GPU, ranks, hosts; the catalog's intra-node link for that GPU and
the given network). One alpha-beta line cannot follow NCCL's protocol ramp (LL for small sizes,
LL128, Simple for large ones) nor a 2-node tree, which moves less than the ring formula counts;
the model does. What a log measures beyond it is fitted per protocol range, on the link that bounds
the collective (the network across hosts, else the node's link), as two factors:

    t = latency_factor x L_p(S) + T_p(S) / bandwidth_factor

L_p and T_p the model's latency and transfer terms under protocol p at size S
(``nccl.time_parts``), by non-negative least squares on relative error (scipy.optimize.nnls: 1 KiB
and 1 GiB weigh alike) as a start, then least squares on the exact model. A term is fitted only
where the log identifies it: the latency where some row of that protocol is mostly latency, the
transfer where some row is mostly transfer or the measured time grows with size across the range
(``GROWTH_RATIO``); otherwise it keeps the catalog link's (its own factor for that protocol, else
1) and the output says so, as for a log that starts at 1 MiB; a protocol the log has no rows of
keeps the catalog link's factors in the written entry. NCCL's tuner never sees the factors:
it keeps choosing by its own model, as the real library does, so a calibrated link still follows the ramp at other rank counts and sizes.

Several tables and files feed one fit per link (the node's link from single-host runs, the network
from multi-host ones), each row noting its file and line; every table must describe the same GPU.
The fit's error on the rows it was fitted to is printed beside the catalog's; the catalog is kept
where it is better (``force`` keeps the fit). A measured busbw above the line rate (a 2-node tree,
NVLink SHARP) and a fitted rate above the line rate are flagged.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from sim.catalog import Catalog, Link, builtin_catalog
from sim.cluster import Cluster
from sim.errors import ConfigError
from sim.nccl_tests import NcclTestsTable

DEVICE_GPUS = (
    # (pattern in nccl-tests' device name, catalog GPU, the intra-node link its board carries);
    # NVIDIA product data: SXM boards carry NVLink 1 (P100), 2 (V100), 3 (A100), 4 (H100, H200);
    # PCIe cards: A100 PCIe Gen4, H100 PCIe Gen5, V100 / P100 / K80 PCIe Gen3.
    (r"H200", "h200", "nvlink4"),
    (r"H100.*PCIe", "h100", "pcie5"),
    (r"H100", "h100", "nvlink4"),
    (r"A100.*PCIE", "a100", "pcie4"),
    (r"A100", "a100", "nvlink3"),
    (r"V100.*PCIE", "v100", "pcie3"),
    (r"V100", "v100", "nvlink2"),
    (r"P100.*PCIE", "p100_pcie", "pcie3"),
    (r"P100", "p100", "nvlink1"),
    (r"K80", "k80", "pcie3"),
)
GPU_INTRA_LINK = {"h200": "nvlink4", "h100": "nvlink4", "a100": "nvlink3", "v100": "nvlink2", "p100": "nvlink1",
                  "p100_pcie": "pcie3", "k80": "pcie3"}
"""The intra-node link of each catalog GPU's usual server board (the SXM form where there is one)."""
GROWTH_RATIO = 1.2
"""Assumed: a protocol range's measured time that grows by 20 % or more across at least a 4x span
of sizes shows its transfer, whatever share the catalog's model gives the transfer there."""
NOT_FITTED_OPS = ("alltoall",)
"""Ops compared but not fitted: NCCL's alltoall model takes no per-protocol factor."""


def gpu_for_device(device: str | None) -> tuple[str, str] | None:
    """(catalog GPU, intra-node link) for nccl-tests' device name; None if the catalog has none."""
    for pattern, gpu, link in DEVICE_GPUS:
        if device and re.search(pattern, device, re.IGNORECASE):
            return gpu, link
    return None


@dataclass(frozen=True)
class ProtocolFit:
    protocol: str
    rows: int
    bandwidth_factor: float
    latency_factor: float
    fitted: tuple[str, ...]
    """Which terms the rows identified ('bandwidth', 'latency'); the others keep the catalog link's
    (its ``nccl_protocols``, else 1)."""
    min_bytes: int
    max_bytes: int


@dataclass(frozen=True)
class LinkFit:
    name: str
    base: str
    role: str
    """intra (single-host runs) or inter (multi-host runs)."""
    protocols: tuple[ProtocolFit, ...]
    sources: tuple[str, ...]
    catalog_error_pct: float
    """Mean |predicted - measured| / measured over the rows, catalog links."""
    fit_error_pct: float
    kept: str
    """fit or catalog."""
    flags: tuple[str, ...] = ()
    inherited: tuple[tuple[str, float, float], ...] = ()
    """The base link's own factors for protocols the log has no rows of: kept as they are."""

    def entry(self) -> dict[str, Any]:
        """The catalog entry this fit writes (the base link alone where the catalog was kept)."""
        out: dict[str, Any] = {"base": self.base}
        if self.kept == "fit":
            fitted = {p.protocol: (p.bandwidth_factor, p.latency_factor) for p in self.protocols}
            merged = {**{name: (bf, lf) for name, bf, lf in self.inherited}, **fitted}
            out["nccl_protocols"] = {proto: {"bandwidth_factor": round(bf, 6), "latency_factor": round(lf, 6)}
                                     for proto, (bf, lf) in merged.items()}
        out["source"] = (f"scalebench calibrate --from-nccl-tests: the catalog's {self.base} "
                         + (f"with NCCL per-protocol factors fitted to {', '.join(self.sources)}" if self.kept == "fit"
                            else f"(the fit to {', '.join(self.sources)} was no better)"))
        return out


@dataclass(frozen=True)
class RowResult:
    table: NcclTestsTable
    size_bytes: int
    measured_s: float
    protocol: str
    catalog_s: float
    fit_s: float
    link: str
    where: str


@dataclass(frozen=True)
class NcclTestsCalibration:
    gpu: str
    intra_link: str
    inter_link: str | None
    links: tuple[LinkFit, ...]
    rows: tuple[RowResult, ...]
    notes: tuple[str, ...] = field(default=())

    def entries(self, name: str) -> dict[str, dict[str, Any]]:
        out = {fit.name: fit.entry() for fit in self.links}
        out.setdefault(f"{name}_intra", {"base": self.intra_link,
                                         "source": f"the catalog's {self.intra_link} (no single-host log to fit it)"})
        return out


def _pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def _cluster(table: NcclTestsTable, gpu, intra: Link, inter: Link, nics_per_node: int) -> Cluster:
    return Cluster(nodes=table.hosts, gpus_per_node=table.ranks // table.hosts, gpu=gpu, intra_link=intra,
                   inter_link=inter, nics_per_node=nics_per_node)


def _resolve_gpu(tables: list[NcclTestsTable], gpu: str | None, catalog: Catalog) -> tuple[str, str | None]:
    """(catalog GPU, its intra-node link or None) for all tables: --gpu, else their devices' name."""
    found = {t.device: gpu_for_device(t.device) for t in tables if t.device}
    if gpu is not None:
        catalog.gpu(gpu, "--gpu")
        return gpu, GPU_INTRA_LINK.get(gpu)
    named = {v for v in found.values() if v is not None}
    if len(named) > 1:
        raise ConfigError("--gpu", None, "one GPU: the logs name " + ", ".join(sorted(d for d in found if d))
                          + " (fit each cluster on its own)")
    if not named:
        seen = ", ".join(f"'{d}' ({t.where})" for t in tables for d in [t.device] if d) or "no '# Rank' lines"
        raise ConfigError("--gpu", None, f"the GPU of the runs (the logs show {seen}): one of "
                          + ", ".join(sorted(catalog.gpus)))
    return next(iter(named))


def calibrate_nccl_tests(tables: list[NcclTestsTable], *, name: str = "nccl_tests", gpu: str | None = None,
                         intra_link: str | None = None, inter_link: str | None = None, nics_per_node: int = 1,
                         force: bool = False, catalog: Catalog | None = None) -> NcclTestsCalibration:
    """Fit the tables (see the module docstring)."""
    from sim.costs.backends import comm_cost
    from sim.costs.backends.nccl import time_parts

    catalog = catalog or builtin_catalog()
    gpu_name, gpu_link = _resolve_gpu(tables, gpu, catalog)
    notes = []
    intra_name = intra_link or gpu_link
    if intra_name is None:
        raise ConfigError("--intra-link", None, f"the link inside a node of {gpu_name}: one of "
                          + ", ".join(sorted(catalog.links)))
    if intra_link is None:
        notes.append(f"intra-node link {intra_name}: the usual board of {gpu_name} (--intra-link to change it)")
    intra = catalog.link(intra_name, "--intra-link")
    multi = [t for t in tables if t.hosts > 1]
    if multi and inter_link is None:
        raise ConfigError("--inter-link", None, f"the catalog's link between the hosts of {multi[0].where} "
                          f"({multi[0].hosts} hosts): one of " + ", ".join(sorted(catalog.links)))
    inter = catalog.link(inter_link, "--inter-link") if inter_link else intra
    gpu_spec = catalog.gpu(gpu_name)
    links: list[LinkFit] = []
    results: list[RowResult] = []
    for role, base, group in (("intra", intra, [t for t in tables if t.hosts == 1]), ("inter", inter, multi)):
        if not group:
            continue
        link_name = f"{name}_{role}"
        def cluster_of(t: NcclTestsTable, link: Link | None = None, role: str = role) -> Cluster:
            return _cluster(t, gpu_spec, link if (link is not None and role == "intra") else intra,
                            link if (link is not None and role == "inter") else inter, nics_per_node)

        fit = _fit_link(role, base, group, cluster_of, time_parts)
        fitted_link = _fitted(base, fit, link_name)
        evaluated = []
        for t in group:
            base_cluster = _cluster(t, gpu_spec, intra, inter, nics_per_node)
            fit_cluster = _cluster(t, gpu_spec, fitted_link if role == "intra" else intra,
                                   fitted_link if role == "inter" else inter, nics_per_node)
            for r in t.rows:
                proto = time_parts(r.op, r.size_bytes, base_cluster)[0]
                evaluated.append(RowResult(t, r.size_bytes, r.time_s, proto,
                                           comm_cost("nccl", r.op, r.size_bytes, base_cluster).time_s,
                                           comm_cost("nccl", r.op, r.size_bytes, fit_cluster).time_s, link_name, r.where))
        catalog_err = statistics.mean(abs(_pct(e.catalog_s, e.measured_s)) for e in evaluated)
        fit_err = statistics.mean(abs(_pct(e.fit_s, e.measured_s)) for e in evaluated)
        kept = "fit" if force or fit_err <= catalog_err else "catalog"
        flags = list(fit[1])
        if kept == "catalog":
            flags.append(f"kept the catalog's {base.name}: the fit is no better on its own rows "
                         f"({fit_err:.1f} % against {catalog_err:.1f} %; --force keeps the fit)")
            evaluated = [RowResult(e.table, e.size_bytes, e.measured_s, e.protocol, e.catalog_s, e.catalog_s, e.link,
                                   e.where) for e in evaluated]
        fitted_names = {p.protocol for p in fit[0]}
        links.append(LinkFit(link_name, base.name, role, fit[0], tuple(_sources(group)), catalog_err, fit_err,
                             kept, tuple(flags), tuple(f for f in base.nccl_protocols if f[0] not in fitted_names)))
        results += evaluated
    return NcclTestsCalibration(gpu_name, intra.name, inter.name if multi else None, tuple(links), tuple(results),
                                tuple(notes))


def _sources(tables: list[NcclTestsTable]) -> list[str]:
    return [f"{t.where} ({t.op}, {t.ranks} ranks on {t.hosts} host(s), {len(t.rows)} sizes "
            f"{_human(min(r.size_bytes for r in t.rows))}-{_human(max(r.size_bytes for r in t.rows))})" for t in tables]


def _human(n: float) -> str:
    for unit in ("B", "K", "M", "G"):
        if n < 1024:
            return f"{n:g}{unit}"
        n /= 1024
    return f"{n:g}T"


def _with_factors(base: Link, factors: tuple[tuple[str, float, float], ...], name: str | None = None) -> Link:
    """``base`` with ``factors`` (protocol, bandwidth, latency) in place of its own for those
    protocols; its factors for the others kept."""
    given = {f[0] for f in factors}
    merged = tuple(f for f in base.nccl_protocols if f[0] not in given) + factors
    return replace(base, name=name or base.name, nccl_protocols=merged)


def _fitted(base: Link, fit: tuple[tuple[ProtocolFit, ...], list[str]], name: str) -> Link:
    return _with_factors(base, tuple((p.protocol, p.bandwidth_factor, p.latency_factor) for p in fit[0]), name)


def _fit_link(role: str, base: Link, tables: list[NcclTestsTable], cluster_of,
              time_parts) -> tuple[tuple[ProtocolFit, ...], list[str]]:
    """Per protocol, the factors of t = lf L + T / bf over the rows (module docstring): which terms
    the rows identify, a linear start (nnls on relative error), then least squares on the exact
    model's relative error (the model is not exactly linear in the factors: pipelines, chunks)."""
    import numpy as np
    from scipy.optimize import least_squares, nnls

    from sim.costs.backends import comm_cost

    by_proto: dict[str, list[tuple[NcclTestsTable, Any, float, float]]] = {}
    flags: list[str] = []
    for t in tables:
        cluster = cluster_of(t)
        line_GBps = (cluster.nics_per_node * base.bandwidth_Bps if role == "inter" else base.bandwidth_Bps) / 1e9
        top = max(t.rows, key=lambda r: r.busbw_GBps)
        if top.busbw_GBps > line_GBps * 1.001:
            flags.append(f"measured busbw {top.busbw_GBps:g} GB/s ({top.where}) is above the line rate "
                         f"({line_GBps:g} GB/s{' of the node' + chr(39) + 's NICs' if role == 'inter' else ''}): "
                         f"the algorithm moves less than busbw counts (a tree on 2 hosts, NVLink SHARP)")
        if t.op in NOT_FITTED_OPS:
            flags.append(f"{t.where}: {t.op} rows are compared, not fitted (its model takes no protocol factor)")
            continue
        for r in t.rows:
            proto, latency, transfer = time_parts(r.op, r.size_bytes, cluster)
            by_proto.setdefault(proto, []).append((t, r, latency, transfer))
    fits = []
    for proto, rows in sorted(by_proto.items()):
        lat = np.array([x[2] for x in rows])
        tra = np.array([x[3] for x in rows])
        m = np.array([x[1].time_s for x in rows])
        sizes = [x[1].size_bytes for x in rows]
        # identified: the latency where some row is mostly latency in the model; the transfer where
        # some row is mostly transfer, or where the measured time grows with size across the range
        has_lat = bool(np.any(lat >= tra))
        grows = len(rows) >= 2 and max(sizes) >= 4 * min(sizes) and float(np.max(m) / np.min(m)) >= GROWTH_RATIO
        has_bw = bool(np.any(tra >= lat)) or grows
        terms = [k for k, ok in (("latency", has_lat), ("bandwidth", has_bw)) if ok]
        # time_parts priced the rows with the base link's own factors (bf0, lf0; 1, 1 on most
        # catalog links): the linear start scales those, and a term the rows do not identify keeps them
        bf0, lf0 = base.protocol_factors(proto)
        start = {"latency": lf0, "bandwidth": 1.0 / bf0}  # as lf and 1 / bf
        if len(terms) == 2:
            (a, g), _ = nnls(np.column_stack([lat / m, tra / m]), np.ones_like(m))
            start = {"latency": a * lf0 if a > 0 else lf0, "bandwidth": g / bf0 if g > 0 else 1.0 / bf0}
        elif terms == ["bandwidth"]:
            start["bandwidth"] = max(float(np.sum(tra / m * (1 - lat / m)) / np.sum((tra / m) ** 2)), 1e-3) / bf0
        elif terms == ["latency"]:
            start["latency"] = max(float(np.sum(lat / m * (1 - tra / m)) / np.sum((lat / m) ** 2)), 1e-3) * lf0

        def factors(x, terms=terms, bf0=bf0, lf0=lf0) -> tuple[float, float]:
            v = dict(zip(terms, np.exp(x), strict=True))
            return (1.0 / v["bandwidth"] if "bandwidth" in v else bf0), v.get("latency", lf0)  # (bf, lf)

        def residuals(x, proto=proto, rows=rows, m=m) -> np.ndarray:
            bf, lf = factors(x)
            link = _with_factors(base, ((proto, bf, lf),))
            return np.array([comm_cost("nccl", r.op, r.size_bytes, cluster_of(t, link)).time_s
                             for t, r, _, _ in rows]) / m - 1.0

        bf, lf = bf0, lf0
        if terms:
            x0 = np.log([start[k] for k in terms])
            bf, lf = factors(least_squares(residuals, x0, diff_step=1e-4).x)
        if bf * base.efficiency > 1.0 + 1e-9:
            flags.append(f"{proto}: the fitted rate is {bf * base.efficiency:.2f} x {base.name}'s line rate "
                         "(above it: the log's algorithm moves less than the model counts)")
        fits.append(ProtocolFit(proto, len(rows), float(bf), float(lf),
                                tuple(k for k in ("bandwidth", "latency") if k in terms), min(sizes), max(sizes)))
    return tuple(fits), flags
