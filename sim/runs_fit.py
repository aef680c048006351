"""Calibrating a scenario from a user's own runs at small scale (``scalebench calibrate --from-runs``).

The runs describe a scenario (workload, GPU, links, strategy); the fit adjusts that scenario's
terms, and only those the runs identify, each in the order the runs allow:

- compute (the GPU's ``compute_scale``: the step's modelled compute x c) from the compute phase of
  any run, else the one-GPU runs' iteration time (the model is linear in c: two simulations solve it);
- the intra-node link's effective bandwidth (``bandwidth_factor`` of the scenario's intra link)
  from runs on one node with several GPUs (their communication phase where given, else their
  iteration time); where that rate does not show (the communication hidden behind compute), or
  where two GPU counts on one node separate a rate from a fixed cost, a per-iteration overhead of
  every multi-GPU step (``multi_gpu_overhead``); overlap (on or off) where the runs' phases say how
  much communication was exposed;
- across nodes, from runs on two or more nodes: a per-iteration overhead (``inter_node_overhead``:
  paid only across nodes, so never by the one-GPU baseline) from one node count on; the
  inter-node link's effective bandwidth from two node counts, or one with its communication phase;
  its per-message latency (``software_latency``) from three node counts.

Each term is estimated by maximum a posteriori (scipy.optimize.least_squares on the runs'
residuals over their uncertainty, sim/runs_io.py, beside a prior centred on the catalog's value):
a run measured to +-8 % moves a term less than one measured to +-1 %. The priors are stated where
they are defined; a term whose estimate owes less than ``IDENTIFIED_SHARE`` of its precision to
the runs is reported as not identified, and the catalog's value kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sim.catalog import Catalog, builtin_catalog
from sim.errors import ConfigError
from sim.runs_io import Run
from sim.scenario import Scenario
from sim.scenario_terms import ScenarioTerms, terms_to_dict

OVERHEAD_PRIOR_FRACTION = 0.05
"""Prior sd of the inter-node overhead, as a fraction of the modelled iteration: simulators of this
kind are off by 3-8 % on their own hardware (DESIGN.md 'The loop': Proteus 3.0 %, Phantora
2.9-6.6 %, dPRO under 5 %, DistSim under 4 %); assumed: the middle, 5 %."""
BANDWIDTH_PRIOR_LOG_SD = math.log(2.0)
"""Prior sd of a link's log bandwidth factor. Assumed: a catalog link delivers within a factor of
2 of a real one (NCCL itself rates a 100 Gb/s NIC at 12 of its 12.5 GB/s, and the devset's NCCL
rings reach 30-95 % of line rate)."""
LATENCY_PRIOR_S = 20e-6
"""Prior sd of the extra per-message latency. Assumed: kernel TCP's tens of microseconds per
message (DESIGN.md 'Figures'), the largest software latency the catalog's links carry."""
IDENTIFIED_SHARE = 0.05
"""A term whose posterior variance is more than 95 % of its prior's owes nothing to the runs."""


@dataclass(frozen=True)
class Theta:
    """Candidate terms, as multipliers or additions to the scenario's own."""

    compute_scale: float = 1.0
    intra_bandwidth_factor: float = 1.0
    inter_bandwidth_factor: float = 1.0
    inter_latency_s: float = 0.0
    multi_gpu_overhead_s: float = 0.0
    inter_node_overhead_s: float = 0.0
    overlap: bool | None = None


@dataclass(frozen=True)
class FittedTerm:
    name: str
    value: float | bool | None
    catalog_value: float | bool | None
    unit: str
    identified: bool
    sd: float | None = None
    share: float | None = None
    """How much of the estimate's precision the runs gave (1 - posterior variance / prior variance)."""
    runs: str = ""
    note: str = ""


@dataclass(frozen=True)
class RunResult:
    run: Run
    catalog_s: float
    fit_s: float


@dataclass(frozen=True)
class RunsCalibration:
    spec: dict[str, Any]
    theta: Theta
    terms: tuple[FittedTerm, ...]
    results: tuple[RunResult, ...]
    intra_link: str
    inter_link: str
    gpu: str

    @property
    def _model(self) -> str:
        workload = self.spec.get("workload") or {}
        return str(workload.get("model", "the workload") if isinstance(workload, dict) else workload)

    def catalog_section(self, catalog: Catalog | None = None) -> dict[str, Any]:
        """The calibration file: link entries that replace the scenario's links by name, and the
        scenario terms (sim/scenario_terms.py)."""
        catalog = catalog or builtin_catalog()
        th, links, gpus = self.theta, {}, {}
        done = {t.name: t for t in self.terms}
        source = "scalebench calibrate --from-runs: " + ", ".join(sorted({r.run.where.rsplit(":", 1)[0]
                                                                         for r in self.results}))
        if done["compute_scale"].identified:
            base_gpu = catalog.gpus[self.gpu]
            gpus[self.gpu] = {"base": self.gpu, "compute_scale": round(base_gpu.compute_scale * th.compute_scale, 6),
                              "source": f"{source}: {self.gpu} as the runs measured the step of {self._model}"}
        if done["intra_bandwidth_factor"].identified:
            base = catalog.links[self.intra_link]
            links[self.intra_link] = {"base": self.intra_link,
                                      "bandwidth_factor": round(base.bandwidth_factor * th.intra_bandwidth_factor, 6),
                                      "source": f"{source}: {self.intra_link} as the single-node runs measured it"}
        inter_entry: dict[str, Any] = {}
        if done["inter_bandwidth_factor"].identified:
            base = catalog.links[self.inter_link]
            inter_entry["bandwidth_factor"] = round(base.bandwidth_factor * th.inter_bandwidth_factor, 6)
        if done["inter_latency_us"].identified:
            base = catalog.links[self.inter_link]
            inter_entry["software_latency_us"] = round((base.software_latency_s + th.inter_latency_s) * 1e6, 4)
        if inter_entry and self.inter_link != self.intra_link:
            links[self.inter_link] = {"base": self.inter_link, **inter_entry,
                                      "source": f"{source}: {self.inter_link} as the multi-node runs measured it"}
        terms = ScenarioTerms(
            workload=self._model,
            multi_gpu_overhead_s=th.multi_gpu_overhead_s if done["multi_gpu_overhead_ms"].identified else 0.0,
            inter_node_overhead_s=th.inter_node_overhead_s if done["inter_node_overhead_ms"].identified else 0.0,
            overlap=th.overlap,
            source=source,
        )
        out: dict[str, Any] = {}
        if gpus:
            out["gpus"] = gpus
        if links:
            out["links"] = links
        out["calibration"] = terms_to_dict(terms)
        return out


SpecBuilder = Callable[[int, int], dict[str, Any]]
"""(GPUs, GPUs per node) -> the scenario dict at that size, where more than the cluster's size
changes with it (a parameter-server count that follows the nodes)."""


class ScenarioModel:
    """The scenario at any run's size, with candidate terms applied: what the fit evaluates."""

    def __init__(self, spec: dict[str, Any] | SpecBuilder, catalog: Catalog | None = None):
        from sim.config import scenario_from_dict

        base = catalog or builtin_catalog()
        self.catalog = replace(base, terms=None)  # a calibration's terms are not the scenario's
        self.spec = spec if isinstance(spec, dict) else spec(1, 1)
        self._builder = spec if callable(spec) else None
        self._from_dict = scenario_from_dict
        self._cache: dict[tuple[int, int], Scenario] = {}
        probe = self.base(1, 1)
        self.intra_link, self.inter_link = probe.cluster.intra_link.name, probe.cluster.inter_link.name

    def spec_at(self, gpus: int, gpus_per_node: int) -> dict[str, Any]:
        if self._builder is not None:
            return self._builder(gpus, min(gpus_per_node, gpus))
        cluster = {k: v for k, v in (self.spec.get("cluster") or {}).items() if k != "nodes"}
        return {**self.spec, "cluster": {**cluster, "gpus": gpus, "gpus_per_node": min(gpus_per_node, gpus)}}

    def base(self, gpus: int, gpus_per_node: int) -> Scenario:
        key = (gpus, gpus_per_node)
        if key not in self._cache:
            self._cache[key] = self._from_dict(self.spec_at(gpus, gpus_per_node), self.catalog)
        return self._cache[key]

    def scenario(self, run_or_config: Run | tuple[int, int], theta: Theta) -> Scenario:
        gpus, gpn = run_or_config.config if isinstance(run_or_config, Run) else run_or_config
        sc = self.base(gpus, gpn)
        c = sc.cluster
        if theta.compute_scale != 1.0:
            c = replace(c, gpu=replace(c.gpu, compute_scale=c.gpu.compute_scale * theta.compute_scale))
        intra = c.intra_link
        if theta.intra_bandwidth_factor != 1.0:
            intra = replace(intra, bandwidth_factor=intra.bandwidth_factor * theta.intra_bandwidth_factor)
        inter = c.inter_link
        if theta.inter_bandwidth_factor != 1.0 or theta.inter_latency_s:
            inter = replace(inter, bandwidth_factor=inter.bandwidth_factor * theta.inter_bandwidth_factor,
                            software_latency_s=inter.software_latency_s + theta.inter_latency_s)
        strategy = sc.strategy
        if theta.multi_gpu_overhead_s:
            strategy = replace(strategy, multi_gpu_overhead_s=strategy.multi_gpu_overhead_s + theta.multi_gpu_overhead_s)
        if theta.inter_node_overhead_s:
            strategy = replace(strategy, inter_node_overhead_s=strategy.inter_node_overhead_s + theta.inter_node_overhead_s)
        if theta.overlap is not None:
            strategy = replace(strategy, overlap=theta.overlap)
        return replace(sc, cluster=replace(c, intra_link=intra, inter_link=inter), strategy=strategy)

    @property
    def gpu(self) -> str:
        return self.base(1, 1).cluster.gpu.name

    def result(self, run_or_config: Run | tuple[int, int], theta: Theta):
        from sim.simulate import simulate

        return simulate(self.scenario(run_or_config, theta))


def _weighted_mean(values: list[float], sds: list[float]) -> tuple[float, float]:
    w = [1.0 / max(s, 1e-12) ** 2 for s in sds]
    mean = sum(v * wi for v, wi in zip(values, w, strict=True)) / sum(w)
    return mean, math.sqrt(1.0 / sum(w))


def _where(runs: list[Run]) -> str:
    return ", ".join(f"{r.gpus} GPU{'s' if r.gpus > 1 else ''} ({r.nodes} node{'s' if r.nodes > 1 else ''})"
                     for r in sorted(runs, key=lambda r: r.config))


def _fit_compute(model: ScenarioModel, runs: list[Run]) -> tuple[float, FittedTerm]:
    """c from compute phases (any run), else from the one-GPU runs' iteration time."""
    phased = [r for r in runs if r.compute_s]
    one = [r for r in runs if r.gpus == 1]
    use, what = (phased, "compute_time_s") if phased else (one, "iteration_time_s")
    if not use:
        return 1.0, FittedTerm("compute_scale", 1.0, 1.0, "x", False,
                               note="no run on one GPU and no compute phase: the catalog's roofline kept")
    estimates, sds = [], []
    for r in use:
        t1 = getattr(model.result(r, Theta()), what)
        t2 = getattr(model.result(r, Theta(compute_scale=2.0)), what)
        slope, intercept = t2 - t1, 2 * t1 - t2
        measured = r.compute_s if what == "compute_time_s" else r.iteration_s
        if slope <= 0 or measured <= intercept:
            raise ConfigError(f"{r.where}: {'compute' if phased else 'iteration'}", measured,
                              f"more than the part the model does not scale ({intercept:.4g} s: optimizer, overheads)")
        estimates.append((measured - intercept) / slope)
        sds.append((r.sd_s if what == "iteration_time_s" else r.sd_s) / slope)
    c, sd = _weighted_mean(estimates, sds)
    return c, FittedTerm("compute_scale", c, 1.0, "x", True, sd, 1.0, _where(use),
                         "the step's modelled compute x this: " + ("the runs' compute phase" if phased
                                                                   else "the one-GPU runs"))


LOG_BANDWIDTH_GRID = [math.log(2.0 ** k) for k in range(-4, 3)]
"""Starting points for a log bandwidth factor (1/16 to 4): where the catalog's rate hides the
communication behind compute, the residuals are flat around 1 and a local search never leaves it."""


def _map_fit(params: list[str], x0: list[float], prior_sd: list[float], bounds: tuple[list[float], list[float]],
             residuals, n_data: int) -> tuple[list[float], list[float], list[float]]:
    """MAP of ``params``: least squares on the data residuals and (x - x0) / prior_sd, started from
    the best of a grid for bandwidth terms. Returns (estimates, posterior sds, shares of precision
    from the data)."""
    import numpy as np
    from scipy.optimize import least_squares

    def full(x):
        return np.concatenate([residuals(x), (np.asarray(x) - np.asarray(x0)) / np.asarray(prior_sd)])

    # start strictly inside the bounds: trf does not leave a start on a bound (an overhead of 0)
    start = [min(max(x, lo + 0.1 * s), hi - 0.1 * s) for x, lo, hi, s in zip(x0, *bounds, prior_sd, strict=True)]
    for i, name in enumerate(params):
        if name in ("intra", "bandwidth"):
            candidates = [start[:i] + [v] + start[i + 1:] for v in LOG_BANDWIDTH_GRID]
            start = min(candidates, key=lambda x: float(np.sum(full(x) ** 2)))
    fit = least_squares(full, np.asarray(start, dtype=float), bounds=bounds, x_scale=np.asarray(prior_sd),
                        diff_step=1e-3)
    jac = fit.jac
    try:
        cov = np.linalg.inv(jac.T @ jac)
        post = [math.sqrt(max(cov[i, i], 0.0)) for i in range(len(params))]
    except np.linalg.LinAlgError:
        post = list(prior_sd)
    shares = [max(0.0, 1.0 - (p / s) ** 2) for p, s in zip(post, prior_sd, strict=True)]
    return [float(v) for v in fit.x], post, shares


def fit_runs(spec: dict[str, Any] | SpecBuilder, runs: list[Run], catalog: Catalog | None = None) -> RunsCalibration:
    """Fit the scenario's terms to the runs (module docstring)."""
    if not runs:
        raise ConfigError("--from-runs", "no runs", "at least one measured run")
    model = ScenarioModel(spec, catalog)
    terms: list[FittedTerm] = []
    c, term = _fit_compute(model, runs)
    terms.append(term)
    theta = Theta(compute_scale=c)

    # one node, several GPUs: the intra-node link (its comm phase where given); an overhead of any
    # multi-GPU step where the link's rate does not show, or where two GPU counts separate the two
    single = [r for r in runs if r.nodes == 1 and r.gpus > 1]
    if single:
        def intra_residuals(x, overhead: bool = False):
            th = replace(theta, intra_bandwidth_factor=math.exp(x[0]),
                         multi_gpu_overhead_s=x[1] if overhead else theta.multi_gpu_overhead_s)
            out = []
            for r in single:
                res = model.result(r, th)
                if r.comm_s:
                    out.append((res.comm_time_s - r.comm_s) / max(r.sd_s, 0.01 * r.comm_s))
                if not r.comm_s or overhead:
                    out.append((res.iteration_time_s - r.iteration_s) / r.sd_s)
            return out

        (log_b,), (sd,), (share,) = _map_fit(["intra"], [0.0], [BANDWIDTH_PRIOR_LOG_SD], ([-5.0], [5.0]),
                                             intra_residuals, len(single))
        ok = share >= IDENTIFIED_SHARE
        single_counts = {r.gpus for r in single}
        over: tuple[float, float | None, float] = (0.0, None, 0.0)
        if not ok or len(single_counts) >= 2:
            typical = sum(model.result(r, theta).iteration_time_s for r in single) / len(single)
            prior = OVERHEAD_PRIOR_FRACTION * typical
            if ok:  # both: two GPU counts on one node tell the rate from a fixed cost
                x, sds, shares = _map_fit(["intra", "overhead"], [0.0, 0.0], [BANDWIDTH_PRIOR_LOG_SD, prior],
                                          ([-5.0, 0.0], [5.0, math.inf]), lambda v: intra_residuals(v, True),
                                          len(single))
                log_b, sd, share = x[0], sds[0], shares[0]
                ok = share >= IDENTIFIED_SHARE
                over = (x[1], sds[1], shares[1])
            else:
                x, sds, shares = _map_fit(["overhead"], [0.0], [prior], ([0.0], [math.inf]),
                                          lambda v: intra_residuals([0.0, v[0]], True), len(single))
                over = (x[0], sds[0], shares[0])
        theta = replace(theta, intra_bandwidth_factor=math.exp(log_b) if ok else 1.0)
        terms.append(FittedTerm("intra_bandwidth_factor", math.exp(log_b) if ok else 1.0, 1.0, "x", ok, sd, share,
                                _where(single), "" if ok else "the runs' communication inside a node is hidden "
                                "behind compute: its rate does not show; the catalog's kept"))
        over_ok = over[1] is not None and over[2] >= IDENTIFIED_SHARE
        theta = replace(theta, multi_gpu_overhead_s=over[0] if over_ok else 0.0)
        terms.append(FittedTerm("multi_gpu_overhead_ms", over[0] * 1e3 if over_ok else 0.0, 0.0, "ms", over_ok,
                                None if over[1] is None else over[1] * 1e3, over[2] if over[1] is not None else None,
                                _where(single), "" if over_ok else (
                                    "the intra-node rate explains the runs on one node" if over[1] is None
                                    else "the runs' uncertainty is larger than what this term changes")))
    else:
        terms.append(FittedTerm("intra_bandwidth_factor", 1.0, 1.0, "x", False,
                                note="no run on one node with several GPUs: the catalog's intra-node link kept"))
        terms.append(FittedTerm("multi_gpu_overhead_ms", 0.0, 0.0, "ms", False,
                                note="no run on one node with several GPUs: no overhead of a multi-GPU step"))
    phased = [r for r in runs if r.gpus > 1 and (r.exposed_comm_s is not None or (r.compute_s and r.comm_s))]
    if phased:
        def overlap_error(flag: bool) -> float:
            err = 0.0
            for r in phased:
                exposed = (r.exposed_comm_s if r.exposed_comm_s is not None
                           else max(0.0, r.iteration_s - (r.compute_s or 0.0)))
                err += (model.result(r, replace(theta, overlap=flag)).exposed_comm_time_s - exposed) ** 2
            return err

        on, off = overlap_error(True), overlap_error(False)
        theta = replace(theta, overlap=on <= off)
        terms.append(FittedTerm("overlap", theta.overlap, model.base(1, 1).strategy.overlap, "", True, None, None,
                                _where(phased), f"exposed communication closer with overlap {'on' if on <= off else 'off'}"))
    else:
        terms.append(FittedTerm("overlap", None, model.base(1, 1).strategy.overlap, "", False,
                                note="no run with phase times: how much communication is exposed does not show; "
                                     "the scenario's kept"))

    # two or more nodes: overhead, then bandwidth, then latency
    multi = [r for r in runs if r.nodes >= 2]
    node_counts = sorted({r.nodes for r in multi})
    names = ["inter_node_overhead_ms", "inter_bandwidth_factor", "inter_latency_us"]
    if multi:
        wanted = ["overhead"]
        if len(node_counts) >= 2 or any(r.comm_s for r in multi):
            wanted.append("bandwidth")
        if len(node_counts) >= 3:
            wanted.append("latency")
        typical = sum(model.result(r, theta).iteration_time_s for r in multi) / len(multi)
        inter = model.base(*multi[0].config).cluster.inter_link
        prior = {"overhead": OVERHEAD_PRIOR_FRACTION * typical, "bandwidth": BANDWIDTH_PRIOR_LOG_SD,
                 "latency": LATENCY_PRIOR_S}
        lower = {"overhead": 0.0, "bandwidth": -5.0, "latency": -inter.software_latency_s}
        upper = {"overhead": math.inf, "bandwidth": 5.0, "latency": math.inf}

        def with_x(x) -> Theta:
            v = dict(zip(wanted, x, strict=True))
            return replace(theta, inter_node_overhead_s=v.get("overhead", 0.0),
                           inter_bandwidth_factor=math.exp(v.get("bandwidth", 0.0)),
                           inter_latency_s=v.get("latency", 0.0))

        def multi_residuals(x):
            th = with_x(x)
            out = []
            for r in multi:
                res = model.result(r, th)
                out.append((res.iteration_time_s - r.iteration_s) / r.sd_s)
                if r.comm_s:
                    out.append((res.comm_time_s - r.comm_s) / max(r.sd_s, 0.01 * r.comm_s))
            return out

        x, sds, shares = _map_fit(wanted, [0.0] * len(wanted), [prior[w] for w in wanted],
                                  ([lower[w] for w in wanted], [upper[w] for w in wanted]), multi_residuals, len(multi))
        fitted = dict(zip(wanted, zip(x, sds, shares, strict=True), strict=True))
        kept = {w: v for w, v in fitted.items() if v[2] >= IDENTIFIED_SHARE}
        theta = with_x([kept.get(w, (0.0,))[0] for w in wanted])
        why_not = {"overhead": "", "bandwidth": "needs runs at two node counts, or one with its communication phase",
                   "latency": "needs runs at three node counts"}
        for name, key, unit, scale, catalog_value, conv in (
                ("inter_node_overhead_ms", "overhead", "ms", 1e3, 0.0, lambda v: v * 1e3),
                ("inter_bandwidth_factor", "bandwidth", "x", 1.0, 1.0, math.exp),
                ("inter_latency_us", "latency", "us", 1e6, 0.0, lambda v: v * 1e6)):
            if key in kept:
                v, sd, share = kept[key]
                terms.append(FittedTerm(name, conv(v), catalog_value, unit, True,
                                        sd * (scale if key != "bandwidth" else math.exp(v)), share, _where(multi)))
            elif key in fitted:
                terms.append(FittedTerm(name, catalog_value, catalog_value, unit, False, None, fitted[key][2],
                                        _where(multi), "the runs' uncertainty is larger than what this term changes"))
            else:
                terms.append(FittedTerm(name, catalog_value, catalog_value, unit, False, note=why_not[key]))
    else:
        for name, unit, value in zip(names, ("ms", "x", "us"), (0.0, 1.0, 0.0), strict=True):
            terms.append(FittedTerm(name, value, value, unit, False,
                                    note="no run on two or more nodes: the catalog's network and no overhead kept"))
    catalog_theta = Theta()
    results = tuple(RunResult(r, model.result(r, catalog_theta).iteration_time_s, model.result(r, theta).iteration_time_s)
                    for r in runs)
    return RunsCalibration(model.spec, theta, tuple(terms), results, model.intra_link, model.inter_link, model.gpu)
