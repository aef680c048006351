"""The real harness' own options, beside the scenario (workload, cluster, strategy).

A scenario dict may carry a ``real:`` section with the keys below; everything else comes from
``sim.config``. Checked in the launching process, before any rank starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.config import Scenario, scenario_from_dict
from sim.errors import ConfigError, reject_unknown_keys, require_choice, require_positive

BACKENDS = ("gloo", "nccl")
DEVICES = ("cpu", "cuda")
"""Where a rank's model, batches and gradients live: the CPU, or CUDA device LOCAL_RANK modulo the
devices this machine has (ranks beyond the device count share them, e.g. 4 gloo ranks on one GPU)."""
REAL_STRATEGIES = ("ddp", "ps_sync", "ps_async", "pipeline")
COMPRESSIONS = ("none", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8")
PIPELINE_SCHEDULES = ("gpipe", "1f1b")
LINKS = ("100mbit", "1gbit", "10gbit")
"""Emulated link rates (tc rate strings); any '<number>mbit|gbit' is accepted too."""
TOPOLOGIES = ("shared", "per_link")

REAL_KEYS = (
    "strategy", "compression", "backend", "device", "lr", "threads", "baseline", "microbatches",
    "schedule", "fault",
)


@dataclass(frozen=True, kw_only=True)
class RealOptions:
    strategy: str = "ddp"
    """ddp | ps_sync | ps_async | pipeline (the scenario's strategy.collective=ps means ps_sync)."""
    compression: str = "none"
    """Gradient format on the wire (DDP communication hook); none = fp32."""
    backend: str = "gloo"
    device: str = "cpu"
    """cpu | cuda: where the ranks compute (nccl: cuda; gloo: cpu unless asked, and gloo then moves
    CUDA tensors through host memory itself)."""
    lr: float = 0.01
    threads: int = 0
    """torch threads per rank; 0 = the machine's cores divided among the ranks."""
    baseline: bool = True
    """Also time rank 0 alone (the others idle) for T1, speedup and scaling efficiency."""
    microbatches: int = 4
    schedule: str = "gpipe"
    fault: dict[str, Any] | None = None
    """Testing only: {rank: r, iteration: i, mode: kill|hang} kills (SIGKILL) or hangs rank r at iteration i."""


def real_options_from_dict(spec: dict[str, Any] | None, scenario: Scenario) -> RealOptions:
    if spec is not None and not isinstance(spec, dict):
        raise ConfigError("real", spec, "a mapping with keys " + ", ".join(REAL_KEYS))
    spec = dict(spec or {})
    reject_unknown_keys("real", spec, REAL_KEYS)
    defaults = defaults_from_strategy(scenario)
    for key, value in defaults.items():
        if key in spec and spec[key] != value and _scenario_sets(scenario, key):
            raise ConfigError(f"real.{key}", spec[key], f"{value!r} as the scenario's strategy says (or leave real.{key} out)")
    spec = {**defaults, **spec}
    strategy = require_choice("real.strategy", spec["strategy"], REAL_STRATEGIES)
    compression = require_choice("real.compression", spec["compression"], COMPRESSIONS)
    if compression.startswith("fp8"):
        _require_float8(compression)
    fault = spec.get("fault")
    if fault is not None and (not isinstance(fault, dict) or not {"rank", "iteration"} <= set(fault)
                              or fault.get("mode", "kill") not in ("kill", "hang")):
        raise ConfigError("real.fault", fault, "{rank: R, iteration: I, mode: kill|hang}")
    backend = require_choice("real.backend", spec.get("backend", "gloo"), BACKENDS)
    options = RealOptions(
        strategy=strategy,
        compression=compression,
        backend=backend,
        device=resolve_device(spec, backend),
        lr=float(require_positive("real.lr", spec.get("lr", 0.01), maximum=10.0,
                                  why="SGD's learning rate; above 10 every model here diverges to NaN loss")),
        threads=require_positive("real.threads", spec.get("threads", 0), integer=True, allow_zero=True),
        baseline=bool(spec.get("baseline", True)),
        microbatches=require_positive("real.microbatches", spec.get("microbatches", 4), integer=True),
        schedule=require_choice("real.schedule", spec["schedule"], PIPELINE_SCHEDULES),
        fault=fault,
    )
    _check_against_scenario(options, scenario)
    return options


def defaults_from_strategy(scenario: Scenario) -> dict[str, Any]:
    """The harness options the scenario's strategy implies, so one description feeds both worlds:
    collective ps -> ps_sync or ps_async (strategy.ps_mode); pp > 1 -> pipeline with the
    strategy's micro-batches and schedule; strategy.codec -> the DDP hook's wire format."""
    s = scenario.strategy
    if s.collective == "ps":
        strategy = "ps_async" if s.ps_mode == "async" else "ps_sync"
    elif s.pp > 1:
        strategy = "pipeline"
    else:
        strategy = "ddp"
    defaults: dict[str, Any] = {"strategy": strategy, "compression": "none" if s.codec in (None, "fp32") else s.codec,
                                "schedule": s.schedule}
    if s.pp > 1:
        defaults["microbatches"] = s.micro_batches
    return defaults


NCCL_ALGO_NAMES = {"ring": "Ring", "tree": "Tree", "nvls": "NVLS"}
"""strategy.collective -> NCCL_ALGO's names (NCCL docs, 'Environment Variables': Tree, Ring,
CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT)."""


def nccl_environment(scenario: Scenario) -> dict[str, str]:
    """The NCCL variables that make a measured NCCL run what the strategy describes, as the
    simulator reads them: strategy.collective ring / tree / nvls -> NCCL_ALGO, strategy.protocol ->
    NCCL_PROTO, strategy.nccl_socket_nthreads / nccl_nsocks_perthread -> NCCL_SOCKET_NTHREADS /
    NCCL_NSOCKS_PERTHREAD; what the strategy leaves to NCCL stays NCCL's (nothing set)."""
    s = scenario.strategy
    env: dict[str, str] = {}
    if s.collective in NCCL_ALGO_NAMES:
        env["NCCL_ALGO"] = NCCL_ALGO_NAMES[s.collective]
    if s.protocol is not None:
        env["NCCL_PROTO"] = s.protocol
    if s.nccl_socket_nthreads is not None:
        env["NCCL_SOCKET_NTHREADS"] = str(s.nccl_socket_nthreads)
    if s.nccl_nsocks_perthread is not None:
        env["NCCL_NSOCKS_PERTHREAD"] = str(s.nccl_nsocks_perthread)
    return env


def _scenario_sets(scenario: Scenario, key: str) -> bool:
    """Whether the scenario's strategy chose this option itself (not left it at its default)."""
    s = scenario.strategy
    return {
        "strategy": s.collective == "ps" or s.pp > 1,
        "compression": s.codec not in (None, "fp32"),
        "microbatches": s.pp > 1,
        "schedule": s.pp > 1,
    }[key]


def _require_float8(compression: str) -> None:
    """fp8 needs a torch that has the dtype; checked only when torch is importable."""
    try:
        import torch
    except ImportError:
        return
    attr = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}[compression]
    if not hasattr(torch, attr):
        raise ConfigError("real.compression", compression, f"a format this torch {torch.__version__} has (no torch.{attr})")


def resolve_device(spec: dict[str, Any], backend: str, field: str = "real.device") -> str:
    """``real.device``, checked: NCCL moves CUDA tensors only; cuda needs a CUDA device here."""
    device = require_choice(field, spec.get("device") or ("cuda" if backend == "nccl" else "cpu"), DEVICES)
    if backend == "nccl" and device != "cuda":
        raise ConfigError(field, device, "cuda with backend nccl (NCCL moves CUDA tensors only)")
    if device == "cuda" and backend != "nccl" and not cuda_device_count():  # nccl: checked per local rank below
        raise ConfigError(field, device, "cpu here (torch sees no CUDA device)")
    return device


def cuda_device_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _on_cuda(spec: dict[str, Any]) -> bool:
    """Whether a spec's ranks compute on CUDA devices (real.backend nccl or real.device cuda)."""
    real = spec.get("real")
    return isinstance(real, dict) and (real.get("backend") == "nccl" or real.get("device") == "cuda")


def runnable_models(on_cuda: bool) -> list[str]:
    """The models the harness trains: on CUDA devices every model of real.models; on the CPU the
    CPU-sized ones (a ResNet-50 step takes seconds per sample on a 2-core machine)."""
    from real.models import MODELS

    return sorted(n for n, m in MODELS.items() if on_cuda or m.cpu_sized)


def _check_against_scenario(options: RealOptions, scenario: Scenario) -> None:
    name = scenario.workload.name
    allowed = runnable_models(options.device == "cuda")
    if name not in allowed:
        raise ConfigError("workload.model", name, allowed)
    world = scenario.cluster.world_size
    if options.strategy == "pipeline":
        from sim.costs.pipeline import layer_unit

        units = len({layer_unit(layer.name) for layer in scenario.workload.layers})
        if world > units:
            raise ConfigError("cluster.gpus", world, f"at most {units} pipeline stages (the model's top-level layers "
                              "with parameters; stages are cut between them)")
        if scenario.workload.batch_size % options.microbatches:
            raise ConfigError("real.microbatches", options.microbatches, f"a divisor of workload.batch_size={scenario.workload.batch_size}")
    if options.strategy in ("ps_sync", "ps_async") and world < 2:
        raise ConfigError("cluster.gpus", world, "at least 2 ranks for a parameter server")
    if options.strategy == "ps_sync" and scenario.strategy.ps_servers > world:
        raise ConfigError("strategy.ps_servers", scenario.strategy.ps_servers, f"at most the world size {world}")
    if options.backend == "nccl":
        if options.strategy != "ddp":
            raise ConfigError("real.backend", "nccl", f"gloo with strategy {options.strategy} (NCCL runs ddp only)")
        gpus = cuda_device_count()
        if gpus < scenario.cluster.gpus_per_node:  # NCCL refuses two ranks on one device ("Duplicate GPU detected")
            raise ConfigError("real.backend", "nccl", f"gloo here: NCCL needs one CUDA device per local rank "
                                                      f"({scenario.cluster.gpus_per_node} ranks, {gpus} devices)")
    if options.compression != "none" and options.strategy != "ddp":
        raise ConfigError("real.compression", options.compression, "none with strategy " + options.strategy)


LOCAL_CPU = "cpu"
"""The catalog's entry for this machine's CPU (sim/data/gpus.yaml), what gloo ranks compute on."""
CPU_DEVICES = (LOCAL_CPU, "cpu_local")
"""GPU names that describe this machine's CPU: the placeholder, and the device `scalebench
calibrate` measures (real/calibrate.py DEVICE_NAME)."""


def measured_labels(backend: str, link: str | None, cuda_device: str = "", *, one_machine: bool = True,
                    device: str | None = None) -> dict[str, str]:
    """The columns of a measured row that say what ran: the device (this machine's CPU, or the
    CUDA device's name under NCCL or ``real.device: cuda``) and the links (this machine's loopback,
    or the rate emulated on it; across machines under torchrun, their network), whatever the
    scenario's cluster names (its gpu and links are the simulator's, e.g. beside a simulated point
    of a ``backend: both`` sweep)."""
    on_cuda = (device or ("cuda" if backend == "nccl" else "cpu")) == "cuda"
    gpu = (cuda_device or "cuda") if on_cuda else LOCAL_CPU
    intra = "nccl local" if backend == "nccl" else (link or "loopback")
    inter = intra if one_machine else f"{backend} over the machines' network"
    return {"gpu": gpu, "intra_link": intra, "inter_link": inter}


def check_measured_labels(spec: dict[str, Any]) -> None:
    """``scalebench real``'s cluster is what it measures: refuse a gpu or a link it does not run on
    (a CPU loopback run labelled H100 over NDR), naming what it runs on instead."""
    cluster = spec.get("cluster")
    if not isinstance(cluster, dict):
        return  # real_scenario names the error
    gpu = cluster.get("gpu")
    if gpu is not None and not _on_cuda(spec) and gpu not in CPU_DEVICES:
        raise ConfigError("cluster.gpu", gpu, f"{' or '.join(CPU_DEVICES)} on the CPU: the harness measures "
                          "this machine's CPU (leave --gpu out; --backend nccl or --device cuda run on CUDA devices)")
    if gpu is not None and _on_cuda(spec) and isinstance(gpu, str):
        device = _cuda_device_name()
        if device and gpu.lower() not in device.lower():
            raise ConfigError("cluster.gpu", gpu, f"the GPU this machine has ({device}), or leave --gpu out")
    for key in ("intra_link", "inter_link"):
        if cluster.get(key) is not None:
            raise ConfigError(f"cluster.{key}", cluster[key], "left out: the harness runs every rank on this machine "
                              "over its loopback (--link 100mbit|1gbit|10gbit emulates a rate; the row's link column "
                              "says which)")


def _cuda_device_name() -> str:
    try:
        import torch
    except ImportError:
        return ""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


def real_scenario(spec: dict[str, Any]) -> tuple[Scenario, RealOptions]:
    """Validate a scenario dict with a ``real:`` section; models only torch knows get a layer table."""
    if not isinstance(spec, dict):
        raise ConfigError("config", type(spec).__name__, "a mapping (workload, cluster, strategy, real)")
    _check_model(spec.get("workload"), _on_cuda(spec))
    spec = _with_layer_table(spec)
    cluster = spec.get("cluster")
    if isinstance(cluster, dict) and "gpus" in cluster and not {"gpus_per_node", "nodes"} & set(cluster):
        cluster = {**cluster, "gpus_per_node": cluster["gpus"]}  # one machine holds every rank
        spec = {**spec, "cluster": cluster}
    if isinstance(cluster, dict) and "gpu" not in cluster and not _on_cuda(spec):
        spec = {**spec, "cluster": {**cluster, "gpu": LOCAL_CPU}}  # what CPU ranks run on
    scenario = scenario_from_dict(spec, extra_keys=("real",))
    return scenario, real_options_from_dict(spec.get("real"), scenario)


def _check_model(workload: Any, on_cuda: bool = False) -> None:
    name = workload.get("model") if isinstance(workload, dict) else workload
    if isinstance(workload, dict) and "layers" in workload:
        return
    allowed = runnable_models(on_cuda)
    if name not in allowed:
        raise ConfigError("workload.model", name, allowed)


def _with_layer_table(spec: dict[str, Any]) -> dict[str, Any]:
    """A CPU-sized model the simulator's zoo lacks gets its table from the torch definition."""
    from sim.workload import zoo_names

    workload = spec.get("workload")
    if isinstance(workload, str):
        workload = {"model": workload}
    if not isinstance(workload, dict) or "layers" in workload or workload.get("model") in zoo_names():
        return spec
    from real.models import MODELS

    if workload.get("model") not in MODELS:
        return spec
    from real.layers import torch_layer_table

    return {**spec, "workload": {**workload, "layers": torch_layer_table(workload["model"])}}
