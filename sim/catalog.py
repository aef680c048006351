"""Hardware as data: accelerators, links and hosts, loaded from YAML with units in the key names.

The built-in entries live in ``sim/data/gpus.yaml``, ``sim/data/links.yaml`` and
``sim/data/hosts.yaml``, each number with its source (what is assumed says so: a link's or host's
``assumed`` list). A user adds or overrides entries in a config file (a ``catalog:`` section with
``gpus:``, ``links:`` and ``hosts:``) or a calibration file, without editing code.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sim.errors import ConfigError, reject_unknown_keys, require_mapping, require_positive
from sim.scenario_terms import ScenarioTerms, terms_from_dict
from sim.units import (
    GIB,
    gbit_per_s_to_Bps,
    gbyte_per_s_to_Bps,
    require_size,
    tflops_to_flops,
    us_to_s,
)
from sim.yamlio import load_yaml_text, read_yaml

COMPUTE_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
LINK_KINDS = ("tcp", "roce", "infiniband", "nvlink", "pcie", "loopback", "measured", "custom")
"""A link's kind selects its transport model (sim.costs.transports.TRANSPORTS)."""
DEVICE_KINDS = ("gpu", "cpu")
NIC_VENDORS = ("aws", "gcp")
"""gpu: collectives default to NCCL; cpu: to gloo (sim.costs.backends.default_backend)."""
ETHERNET_FRAME_OVERHEAD_BYTES = 38
"""Bytes an Ethernet frame costs on the wire beyond its IP packet: preamble and start delimiter 8,
MAC header 14, FCS 4, inter-frame gap 12 (IEEE 802.3 clause 3 and 4)."""
TCP_IP_HEADER_BYTES = 52
"""IPv4 20 + TCP 20 + the timestamps option 12 (RFC 791, RFC 9293, RFC 7323; Linux enables
timestamps by default: net.ipv4.tcp_timestamps = 1), so MSS = MTU - 52 (1448 at MTU 1500)."""


@dataclass(frozen=True, kw_only=True)
class NodeDesign:
    """The server a GPU usually comes in (its DGX / HGX board): what a cluster that names only the
    GPU gets (sim.cluster.cluster_from_dict)."""

    gpus_per_node: int
    intra_link: str
    """The catalog link between its GPUs (NVLink generation, through NVSwitch where it has one)."""
    inter_link: str
    """The catalog link of its compute NICs."""
    nics_per_node: int
    """Compute NICs (rail-aligned: one per GPU on DGX A100/H100/H200, one per two GPUs on DGX-1)."""
    source: str = ""

    def describe(self) -> str:
        return (f"{self.gpus_per_node} GPUs on {self.intra_link}, {self.nics_per_node} x {self.inter_link} "
                f"NIC{'s' if self.nics_per_node > 1 else ''}")


_NODE_KEYS = ("gpus_per_node", "intra_link", "inter_link", "nics_per_node", "source")


def node_from_dict(spec: Any, where: str) -> NodeDesign:
    if not isinstance(spec, dict):
        raise ConfigError(where, spec, "a mapping with keys " + ", ".join(_NODE_KEYS))
    reject_unknown_keys(where, spec, _NODE_KEYS)
    for key in ("intra_link", "inter_link"):
        if not isinstance(spec.get(key), str):
            raise ConfigError(f"{where}.{key}", spec.get(key), "a link name of the catalog")
    return NodeDesign(
        gpus_per_node=require_positive(f"{where}.gpus_per_node", spec.get("gpus_per_node"), integer=True),
        intra_link=spec["intra_link"], inter_link=spec["inter_link"],
        nics_per_node=require_positive(f"{where}.nics_per_node", spec.get("nics_per_node"), integer=True),
        source=str(spec.get("source", "")))


@dataclass(frozen=True, kw_only=True)
class GPU:
    """An accelerator (or the local CPU) as the cost layer sees it."""

    name: str
    peak_flops: dict[str, float]
    """Dense peak FLOP/s per compute dtype."""
    memory_bandwidth_Bps: float
    memory_bytes: float
    efficiency: float = 0.5
    """Fraction of peak FLOP/s a dense layer reaches (roofline's compute roof is peak x this)."""
    launch_overhead_s: float = 0.0
    """Fixed cost per layer and pass (kernel launches): the floor of a tiny layer's time."""
    kind: str = "gpu"
    """gpu or cpu (DEVICE_KINDS): which collective library a strategy gets by default."""
    compute_capability: float | None = None
    """CUDA compute capability (7.0 Volta, 8.0 Ampere, 9.0 Hopper): NCCL's tuning tables are
    indexed by it (src/graph/tuning.cc). None: not an NVIDIA GPU."""
    sm_count: int = 0
    """Streaming multiprocessors (datasheet); NCCL's kernels hold one per channel
    (sim/costs/contention.py). 0: unknown."""
    compute_scale: float = 1.0
    """Measured: a step's modelled compute (layers by roofline, optimizer) runs this many times
    the model's on this GPU (``scalebench calibrate --from-runs`` fits it to one-GPU runs); 1: the
    roofline's. Measured layer times are not scaled."""
    nvlinks: int = 0
    """NVLink links per GPU; NCCL's topology gives each one ncclTopoNVLinkBw(compute capability)
    (src/graph/topo.h)."""
    host: str | None = None
    """The host (a key of the catalog's hosts) the GPU usually sits in: a cluster of these GPUs
    that names no ``cluster.host`` runs on it; None: the catalog's DEFAULT_HOST."""
    node: NodeDesign | None = None
    """The server it usually comes in (a cluster's defaults); None: no usual server (one GPU per node)."""
    source: str = ""

    def flops_for(self, dtype: str) -> float:
        """Peak FLOP/s for ``dtype``; a part without that dtype runs it at its fp32 rate."""
        if dtype in self.peak_flops:
            return self.peak_flops[dtype]
        return self.peak_flops["fp32"]


@dataclass(frozen=True, kw_only=True)
class Link:
    """A link class: per-direction bandwidth, per-message latency, achievable fraction."""

    name: str
    kind: str
    bandwidth_Bps: float
    """Line rate per direction."""
    latency_s: float
    """Hardware latency of one message."""
    software_latency_s: float = 0.0
    """What the transport's software adds per message (kernel TCP, collective library)."""
    efficiency: float = 1.0
    """Fraction of line rate that carries payload (for tcp links: derived from the MTU unless
    given)."""
    mtu_bytes: int = 1500
    """IP MTU of the link (tcp: payload per packet = MTU - TCP_IP_HEADER_BYTES)."""
    per_flow_bandwidth_Bps: float | None = None
    """A cap on one flow (one 5-tuple) that the network enforces, e.g. a cloud's per-flow limit;
    None: none."""
    tcp_window_bytes: float | None = None
    """Largest TCP window a stream on this link reaches (socket buffer limits); None: the
    transport's default (sim.costs.transports.LINUX_TCP)."""
    tcp_stream_Bps: float | None = None
    """What one TCP stream's kernel copies reach on the hosts (one core sends it, one receives it);
    None: the transport's default (sim.costs.transports.LINUX_TCP.stream_copy_Bps, measured)."""
    nic_vendor: str | None = None
    """The NIC's maker where a library tunes itself to it (NCCL's socket transport opens 16
    streams on AWS ENA, 4 on Google's gVNIC): NIC_VENDORS, or None."""
    shaped: bool = False
    """The rate is a host-side shaper's (Linux tc): it counts each packet's bytes from its MAC
    header on, not the preamble, FCS and gap of the wire."""
    assumed: tuple[str, ...] = ()
    """The entry's fields whose value is an assumption rather than a sourced figure (listed by
    ``scalebench list links``)."""
    bandwidth_factor: float = 1.0
    """Measured: what this link delivers over what the model gives it (``scalebench calibrate
    --from-runs``): scales the achievable rate and a TCP stream's copy rate; 1: the model's."""
    nccl_protocols: tuple[tuple[str, float, float], ...] = ()
    """Measured per NCCL protocol: (protocol, bandwidth factor, latency factor) on NCCL's predicted
    bus bandwidth and latency where this link is a collective's bottleneck (``scalebench
    calibrate --from-nccl-tests``); a protocol not listed: 1, 1."""
    source: str = ""

    @property
    def alpha_s(self) -> float:
        """Per-message cost, the alpha of the alpha-beta model."""
        return self.latency_s + self.software_latency_s

    @property
    def effective_Bps(self) -> float:
        """Achievable bandwidth, 1/beta of the alpha-beta model (x a measured bandwidth factor)."""
        return self.bandwidth_Bps * self.efficiency * self.bandwidth_factor

    def protocol_factors(self, protocol: str) -> tuple[float, float]:
        """(bandwidth factor, latency factor) fitted for NCCL's ``protocol`` on this link; (1, 1) if none."""
        for name, bandwidth, latency in self.nccl_protocols:
            if name == protocol:
                return bandwidth, latency
        return 1.0, 1.0


_GPU_KEYS = (
    "peak_tflops", "memory_bandwidth_GBps", "memory_GiB", "efficiency", "launch_overhead_us", "kind",
    "compute_capability", "nvlinks", "sm_count", "host", "node", "base", "compute_scale", "source",
)
_GPU_BASED_KEYS = ("base", "compute_scale", "source")
"""What an entry that starts from another GPU (``base:``) may give: a calibration of it."""
_LINK_KEYS = (
    "kind", "bandwidth_Gbps", "bandwidth_GBps", "latency_us", "software_latency_us",
    "efficiency", "mtu_bytes", "per_flow_Gbps", "tcp_window_MiB", "tcp_stream_Gbps", "nic_vendor", "base", "tc",
    "assumed", "bandwidth_factor", "nccl_protocols", "source",
)
_TC_KEYS = ("rate_Gbps", "delay_ms")
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")
"""NCCL's protocols (src/include/devcomm.h NCCL_PROTO_*), the keys of a link's nccl_protocols."""
_FACTOR_KEYS = ("bandwidth_factor", "latency_factor")


def _factor(field_name: str, value: Any) -> float:
    require_positive(field_name, value)
    return float(value)


def _nccl_protocols(here: str, spec: Any) -> tuple[tuple[str, float, float], ...]:
    if not isinstance(spec, dict):
        raise ConfigError(f"{here}.nccl_protocols", spec, "a mapping of " + ", ".join(NCCL_PROTOCOLS)
                          + " to {bandwidth_factor, latency_factor}")
    out = []
    for proto, factors in spec.items():
        if proto not in NCCL_PROTOCOLS:
            raise ConfigError(f"{here}.nccl_protocols.{proto}", proto, NCCL_PROTOCOLS)
        where = f"{here}.nccl_protocols.{proto}"
        if not isinstance(factors, dict):
            raise ConfigError(where, factors, "a mapping with keys " + ", ".join(_FACTOR_KEYS))
        reject_unknown_keys(where, factors, _FACTOR_KEYS)
        out.append((proto, _factor(f"{where}.bandwidth_factor", factors.get("bandwidth_factor", 1.0)),
                    _factor(f"{where}.latency_factor", factors.get("latency_factor", 1.0))))
    return tuple(out)
MAX_LATENCY_US = 1e7
"""Typo guards on catalog entries (issue 29's families: 1e30 passed everywhere), each far past the
hardware there is: 10 s of latency per message (a geostationary hop is 0.25 s), an MTU of 65,536
(the loopback's), 100 TiB of device memory, 1 s of launch overhead, compute capability < 100,
10,000 SMs, 1,024 NVLinks (assumed, all of them). Rates are not bounded above: a free link or an
ideal device is written as a very large rate (the tests' ``bandwidth_GBps: 1e9``), the limit of
what is not the bottleneck; only NaN and infinity are refused."""
MAX_MTU_BYTES = 65536
MAX_MEMORY_GIB = 100 * 1024.0
MAX_LAUNCH_US = 1e6


def _fraction(field_name: str, value: Any) -> float:
    require_positive(field_name, value)
    if value > 1:
        raise ConfigError(field_name, value, "a fraction in (0, 1]")
    return float(value)


def _rate(field_name: str, value: Any) -> float:
    return float(require_positive(field_name, value))


def _latency(field_name: str, value: Any, scale: float = 1.0) -> float:
    """A latency in us (``scale`` 1) or ms (1e3), at most MAX_LATENCY_US."""
    return float(require_positive(field_name, value, allow_zero=True, maximum=MAX_LATENCY_US / scale, why="10 s"))


def gpu_from_dict(name: str, spec: dict[str, Any], where: str = "catalog.gpus",
                  gpus: dict[str, GPU] | None = None) -> GPU:
    """A GPU from its catalog entry; ``base: NAME`` starts from another GPU of ``gpus`` and may only
    calibrate it (``compute_scale``, ``source``)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}.{name}", spec, "a mapping with keys " + ", ".join(_GPU_KEYS))
    reject_unknown_keys(f"{where}.{name}", spec, _GPU_KEYS)
    scale = float(require_positive(f"{where}.{name}.compute_scale", spec.get("compute_scale", 1.0)))
    if "base" in spec:
        known = gpus or {}
        if spec["base"] not in known:
            raise ConfigError(f"{where}.{name}.base", spec["base"], known)
        other = sorted(set(spec) - set(_GPU_BASED_KEYS))
        if other:
            raise ConfigError(f"{where}.{name}.{other[0]}", spec[other[0]], "with base: only "
                              + ", ".join(_GPU_BASED_KEYS[1:]) + " (a GPU of its own gives every figure, without base)")
        base = known[spec["base"]]
        return replace(base, name=name, compute_scale=base.compute_scale * scale,
                       source=str(spec.get("source", base.source)))
    peak = spec.get("peak_tflops")
    if not isinstance(peak, dict) or "fp32" not in peak:
        raise ConfigError(f"{where}.{name}.peak_tflops", peak, "a mapping of dtype to TFLOP/s with at least fp32")
    flops = {}
    for dtype, tflops in peak.items():
        if dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"{where}.{name}.peak_tflops.{dtype}", dtype, COMPUTE_DTYPES)
        flops[dtype] = tflops_to_flops(require_positive(f"{where}.{name}.peak_tflops.{dtype}", tflops))
    for key in ("memory_bandwidth_GBps", "memory_GiB"):
        if key not in spec:
            raise ConfigError(f"{where}.{name}.{key}", None, "a positive number (required)")
    kind = spec.get("kind", "gpu")
    if kind not in DEVICE_KINDS:
        raise ConfigError(f"{where}.{name}.kind", kind, DEVICE_KINDS)
    cc = spec.get("compute_capability")
    host = spec.get("host")
    if host is not None and (not isinstance(host, str) or not host):
        raise ConfigError(f"{where}.{name}.host", host, "the name of a host entry (sim/data/hosts.yaml or catalog: hosts:)")
    return GPU(
        name=name,
        peak_flops=flops,
        memory_bandwidth_Bps=gbyte_per_s_to_Bps(require_positive(f"{where}.{name}.memory_bandwidth_GBps",
                                                                 spec["memory_bandwidth_GBps"])),
        memory_bytes=require_size(f"{where}.{name}.memory_GiB", spec["memory_GiB"], "GiB", maximum=MAX_MEMORY_GIB,
                                  why="100 TiB per device") * GIB,
        efficiency=_fraction(f"{where}.{name}.efficiency", spec.get("efficiency", 0.5)),
        launch_overhead_s=us_to_s(
            require_positive(f"{where}.{name}.launch_overhead_us", spec.get("launch_overhead_us", 0), allow_zero=True,
                             maximum=MAX_LAUNCH_US, why="a second per kernel launch")
        ),
        kind=kind,
        compute_capability=None if cc is None else float(require_positive(f"{where}.{name}.compute_capability", cc,
                                                                          maximum=99.9, why="major.minor, e.g. 9.0")),
        nvlinks=require_positive(f"{where}.{name}.nvlinks", spec.get("nvlinks", 0), integer=True, allow_zero=True,
                                 maximum=1024),
        sm_count=require_positive(f"{where}.{name}.sm_count", spec.get("sm_count", 0), integer=True, allow_zero=True,
                                  maximum=10_000),
        node=None if spec.get("node") is None else node_from_dict(spec["node"], f"{where}.{name}.node"),
        compute_scale=scale,
        host=host,
        source=str(spec.get("source", "")),
    )


def tcp_payload_efficiency(mtu_bytes: int, shaped: bool) -> float:
    """Payload per byte the link's rate counts, for full-sized TCP segments:
    (MTU - 52) / (MTU + 38) on Ethernet (1448 / 1538 = 0.941 at MTU 1500; 8949 / 9039 = 0.990 at
    a 9001-byte jumbo MTU); a Linux tc shaper counts each packet from its MAC header on (netem and
    tbf charge qdisc_pkt_len(skb), which includes the 14-byte Ethernet header and, for segmentation
    offload, the headers of every segment: net/core/dev.c qdisc_pkt_len_init), so a shaped rate
    carries (MTU - 52) / (MTU + 14)."""
    overhead = 14 if shaped else ETHERNET_FRAME_OVERHEAD_BYTES
    return (mtu_bytes - TCP_IP_HEADER_BYTES) / (mtu_bytes + overhead)


def link_from_dict(name: str, spec: dict[str, Any], where: str = "catalog.links",
                   links: dict[str, Link] | None = None) -> Link:
    """A link from its catalog entry. ``base: NAME`` starts from another link of ``links`` (the
    built-in catalog and earlier entries) and overrides what the entry gives; ``tc: {rate_Gbps,
    delay_ms}`` shapes it as Linux tc on each host's egress does (rate = min(line, rate_Gbps),
    one-way latency + delay_ms)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}.{name}", spec, "a mapping with keys " + ", ".join(_LINK_KEYS))
    reject_unknown_keys(f"{where}.{name}", spec, _LINK_KEYS)
    here = f"{where}.{name}"
    base = None
    if "base" in spec:
        known = links or {}
        if not isinstance(spec["base"], str) or spec["base"] not in known:
            raise ConfigError(f"{here}.base", spec["base"], known)
        base = known[spec["base"]]
    has_gbit, has_gbyte = "bandwidth_Gbps" in spec, "bandwidth_GBps" in spec
    if has_gbit and has_gbyte or (base is None and not (has_gbit or has_gbyte)):
        raise ConfigError(here, sorted(spec), "exactly one of bandwidth_Gbps, bandwidth_GBps (or a base link)")
    if has_gbit:
        bandwidth = gbit_per_s_to_Bps(_rate(f"{here}.bandwidth_Gbps", spec["bandwidth_Gbps"]))
    elif has_gbyte:
        bandwidth = gbyte_per_s_to_Bps(require_positive(f"{here}.bandwidth_GBps", spec["bandwidth_GBps"]))
    else:
        bandwidth = base.bandwidth_Bps  # type: ignore[union-attr]
    kind = spec.get("kind", base.kind if base else "custom")
    if kind not in LINK_KINDS:
        raise ConfigError(f"{here}.kind", kind, LINK_KINDS)
    if "latency_us" in spec:
        latency_s = us_to_s(_latency(f"{here}.latency_us", spec["latency_us"]))
    elif base is not None:
        latency_s = base.latency_s
    else:
        raise ConfigError(f"{here}.latency_us", None, "a non-negative number (required)")
    software_s = (us_to_s(_latency(f"{here}.software_latency_us", spec["software_latency_us"]))
                  if "software_latency_us" in spec else (base.software_latency_s if base else 0.0))
    mtu = int(require_size(f"{here}.mtu_bytes", spec["mtu_bytes"], "bytes", integer=True, maximum=MAX_MTU_BYTES,
                           why="the loopback's MTU")) if "mtu_bytes" in spec else (
        base.mtu_bytes if base else 1500)
    if mtu <= TCP_IP_HEADER_BYTES:
        raise ConfigError(f"{here}.mtu_bytes", mtu, f"more than the {TCP_IP_HEADER_BYTES} bytes of TCP/IP headers")
    per_flow = (gbit_per_s_to_Bps(_rate(f"{here}.per_flow_Gbps", spec["per_flow_Gbps"]))
                if "per_flow_Gbps" in spec else (base.per_flow_bandwidth_Bps if base else None))
    window = (require_size(f"{here}.tcp_window_MiB", spec["tcp_window_MiB"], "MiB") * 2**20
              if "tcp_window_MiB" in spec else (base.tcp_window_bytes if base else None))
    stream = (gbit_per_s_to_Bps(_rate(f"{here}.tcp_stream_Gbps", spec["tcp_stream_Gbps"]))
              if "tcp_stream_Gbps" in spec else (base.tcp_stream_Bps if base else None))
    nic_vendor = spec.get("nic_vendor", base.nic_vendor if base else None)
    if nic_vendor is not None and nic_vendor not in NIC_VENDORS:
        raise ConfigError(f"{here}.nic_vendor", nic_vendor, NIC_VENDORS)
    shaped = base.shaped if base else False
    assumed = _assumed_fields(f"{here}.assumed", spec.get("assumed", base.assumed if base else ()), _LINK_KEYS)
    tc = spec.get("tc")
    if tc is not None:
        if not isinstance(tc, dict) or not tc:
            raise ConfigError(f"{here}.tc", tc, "a mapping with keys " + ", ".join(_TC_KEYS))
        reject_unknown_keys(f"{here}.tc", tc, _TC_KEYS)
        if "rate_Gbps" in tc:
            bandwidth = min(bandwidth, gbit_per_s_to_Bps(_rate(f"{here}.tc.rate_Gbps", tc["rate_Gbps"])))
            shaped = True
        if "delay_ms" in tc:
            latency_s += _latency(f"{here}.tc.delay_ms", tc["delay_ms"], scale=1e3) * 1e-3
    if "efficiency" in spec:
        efficiency = _fraction(f"{here}.efficiency", spec["efficiency"])
    elif kind == "tcp":
        efficiency = tcp_payload_efficiency(mtu, shaped)
    else:
        efficiency = base.efficiency if base else 1.0
    bandwidth_factor = (_factor(f"{here}.bandwidth_factor", spec["bandwidth_factor"]) if "bandwidth_factor" in spec
                        else (base.bandwidth_factor if base else 1.0))
    nccl_protocols = (_nccl_protocols(here, spec["nccl_protocols"]) if "nccl_protocols" in spec
                      else (base.nccl_protocols if base else ()))
    return Link(
        name=name,
        kind=kind,
        bandwidth_Bps=bandwidth,
        latency_s=latency_s,
        software_latency_s=software_s,
        efficiency=efficiency,
        mtu_bytes=mtu,
        per_flow_bandwidth_Bps=per_flow,
        tcp_window_bytes=window,
        tcp_stream_Bps=stream,
        nic_vendor=nic_vendor,
        shaped=shaped,
        assumed=assumed,
        bandwidth_factor=bandwidth_factor,
        nccl_protocols=nccl_protocols,
        source=str(spec.get("source", base.source if base else "")),
    )


def _assumed_fields(field_name: str, value: Any, keys: tuple[str, ...]) -> tuple[str, ...]:
    """An entry's ``assumed`` list: names of its own keys whose values are assumptions."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(field_name, value, "a list of the entry's keys whose values are assumed")
    for v in value:
        if v not in keys or v in ("assumed", "source", "base"):
            raise ConfigError(field_name, v, "a key of the entry: " + ", ".join(k for k in keys if k not in ("assumed", "source", "base")))
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class Host:
    """The CPU side of a node, where the kernel copies socket data and libraries reduce on the host."""

    name: str
    cpu: str = ""
    cores: int
    """Physical cores of the whole node (all sockets; a VM's vCPUs): what the input pipeline's
    workers and the training processes share (sim.costs.input_pipeline)."""
    tcp_stream_Bps: float
    """What one TCP stream's kernel copies reach (one core sends it, one receives it)."""
    memcpy_Bps: float
    """One core's memcpy, bytes copied per second (a pageable cudaMemcpy's staging copy)."""
    reduce_Bps: float
    """One core summing float32 buffers, memory traffic per second (two reads and a write per element)."""
    pcie_Bps: float
    """What a pinned cudaMemcpy moves between host and GPU: the GPUs' PCIe link (``pcie_link``)."""
    assumed: tuple[str, ...] = ()
    source: str = ""


_HOST_KEYS = ("cpu", "cores", "tcp_stream_Gbps", "memcpy_GBps", "reduce_GBps", "pcie_link", "assumed", "source")
_HOST_REQUIRED = ("cores", "tcp_stream_Gbps", "memcpy_GBps", "reduce_GBps", "pcie_link")
DEFAULT_HOST = "epyc_vm_2026"
"""The host a cluster that names none runs on: the machine scalebench's own figures were measured on."""


def host_from_dict(name: str, spec: dict[str, Any], links: dict[str, Link], where: str = "catalog.hosts") -> Host:
    here = f"{where}.{name}"
    if not isinstance(spec, dict):
        raise ConfigError(here, spec, "a mapping with keys " + ", ".join(_HOST_KEYS))
    reject_unknown_keys(here, spec, _HOST_KEYS)
    for key in _HOST_REQUIRED:
        if key not in spec:
            raise ConfigError(f"{here}.{key}", None, "required (" + ", ".join(_HOST_REQUIRED) + ")")
    pcie = spec["pcie_link"]
    if pcie not in links or links[pcie].kind != "pcie":
        raise ConfigError(f"{here}.pcie_link", pcie, sorted(n for n, link in links.items() if link.kind == "pcie"))
    return Host(
        name=name, cpu=str(spec.get("cpu", "")),
        cores=require_positive(f"{here}.cores", spec["cores"], integer=True, maximum=65536,
                               why="cores of one node (the largest two-socket servers have a few hundred)"),
        tcp_stream_Bps=gbit_per_s_to_Bps(require_positive(f"{here}.tcp_stream_Gbps", spec["tcp_stream_Gbps"])),
        memcpy_Bps=gbyte_per_s_to_Bps(require_positive(f"{here}.memcpy_GBps", spec["memcpy_GBps"])),
        reduce_Bps=gbyte_per_s_to_Bps(require_positive(f"{here}.reduce_GBps", spec["reduce_GBps"])),
        pcie_Bps=links[pcie].effective_Bps,
        assumed=_assumed_fields(f"{here}.assumed", spec.get("assumed", ()), _HOST_KEYS),
        source=str(spec.get("source", "")),
    )


def _read_builtin(filename: str) -> dict[str, Any]:
    text = resources.files("sim").joinpath("data", filename).read_text(encoding="utf-8")
    return load_yaml_text(text)


@dataclass(frozen=True)
class Catalog:
    """All known GPUs and links by name, and a calibration file's scenario terms."""

    gpus: dict[str, GPU] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)
    terms: ScenarioTerms | None = None
    """A calibration file's ``calibration:`` section (sim/scenario_terms.py), which every scenario
    read with this catalog gets (sim.config.scenario_from_dict); None: none."""

    def gpu(self, name: str, field_name: str = "cluster.gpu") -> GPU:
        if not isinstance(name, str) or name not in self.gpus:
            raise ConfigError(field_name, name, self.gpus)
        return self.gpus[name]

    def link(self, name: str, field_name: str = "cluster.link") -> Link:
        if not isinstance(name, str) or name not in self.links:
            raise ConfigError(field_name, name, self.links)
        return self.links[name]

    def host(self, name: str, field_name: str = "cluster.host") -> Host:
        if not isinstance(name, str) or name not in self.hosts:
            raise ConfigError(field_name, name, self.hosts)
        return self.hosts[name]

    def extended(self, extra: dict[str, Any] | None, where: str = "catalog") -> Catalog:
        """A new catalog with the entries of ``extra`` (``{gpus: {...}, links: {...}, hosts: {...}}``) added."""
        if not extra:
            return self
        if not isinstance(extra, dict):
            raise ConfigError(where, extra, "a mapping with keys gpus, links, hosts, calibration")
        reject_unknown_keys(where, extra, ("gpus", "links", "hosts", "calibration"))
        gpus = dict(self.gpus)
        links = dict(self.links)
        hosts = dict(self.hosts)
        for name, spec in require_mapping(f"{where}.gpus", extra.get("gpus") or {}, "a mapping of GPU name to its entry").items():
            gpus[name] = gpu_from_dict(name, spec, f"{where}.gpus", gpus)
        for name, spec in require_mapping(f"{where}.links", extra.get("links") or {}, "a mapping of link name to its entry").items():
            links[name] = link_from_dict(name, spec, f"{where}.links", links)
        for name, spec in require_mapping(f"{where}.hosts", extra.get("hosts") or {}, "a mapping of host name to its entry").items():
            hosts[name] = host_from_dict(name, spec, links, f"{where}.hosts")
        _check_gpu_hosts({n: gpus[n] for n in (extra.get("gpus") or {})}, hosts, f"{where}.gpus")
        terms = self.terms
        if extra.get("calibration") is not None:
            terms = terms_from_dict(extra["calibration"], f"{where}.calibration")
        return Catalog(gpus, links, hosts, terms)


@cache
def builtin_catalog() -> Catalog:
    """The shipped catalog, parsed once per process (Catalog is immutable; ``extended`` copies)."""
    gpus = {n: gpu_from_dict(n, s, "sim/data/gpus.yaml") for n, s in _read_builtin("gpus.yaml").items()}
    links: dict[str, Link] = {}
    for n, s in _read_builtin("links.yaml").items():
        links[n] = link_from_dict(n, s, "sim/data/links.yaml", links)
    hosts = {n: host_from_dict(n, s, links, "sim/data/hosts.yaml") for n, s in _read_builtin("hosts.yaml").items()}
    _check_gpu_hosts(gpus, hosts, "sim/data/gpus.yaml")
    return Catalog(gpus, links, hosts)


def _check_gpu_hosts(gpus: dict[str, GPU], hosts: dict[str, Host], where: str) -> None:
    for name, gpu in gpus.items():
        if gpu.host is not None and gpu.host not in hosts:
            raise ConfigError(f"{where}.{name}.host", gpu.host, hosts)


def usual_host(gpu: GPU, catalog: Catalog) -> Host | None:
    """The host a cluster of ``gpu`` runs on when it names none: the GPU entry's ``host``
    (its era's usual server), or None (the DEFAULT_HOST)."""
    return catalog.hosts.get(gpu.host) if gpu.host is not None else None


def host_of(cluster: Any) -> Host:
    """The cluster's host (``cluster.host``: named, or its GPU's usual one), or the built-in
    DEFAULT_HOST where neither gives one."""
    return cluster.host if getattr(cluster, "host", None) is not None else builtin_catalog().hosts[DEFAULT_HOST]


def load_catalog_file(path: str | Path, base: Catalog | None = None) -> Catalog:
    """Extend ``base`` (the built-in catalog by default) with a YAML file of gpus/links."""
    data = read_yaml(path, what="catalog")
    if data is None or (isinstance(data, dict) and not any(data.get(k) for k in ("gpus", "links"))):
        if isinstance(data, dict):
            reject_unknown_keys(str(path), data, ("gpus", "links"))
        raise ConfigError("catalog", str(path), "a catalog file with at least one entry under gpus: or links: (it "
                          f"{'adds nothing' if data else 'is empty'}; `scalebench calibrate` writes one)")
    return (base or builtin_catalog()).extended(data, where=str(path))
