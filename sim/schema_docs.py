"""The description of every config key, for ``scalebench schema`` (editors show them as the
key's hover text and beside its completion).

Most come from the code itself: a key's dataclass field and the attribute docstring written under
it (``Strategy.bucket_bytes`` for ``strategy.bucket_mib``: the key's unit suffix maps to the
field's SI one, ``_mib``/``_GiB`` -> ``_bytes``, ``_ms``/``_us`` -> ``_s``, ``_Gbps``/``_GBps`` ->
``_Bps``), so a field documented where it is defined is documented in the schema too. The rest
are written here (``WRITTEN``). tests/test_schema.py fails on a key with neither.
"""

from __future__ import annotations

import ast
import inspect
from functools import cache
from typing import Any

UNIT_SWAPS = (("_mib", "_bytes"), ("_MiB", "_bytes"), ("_GiB", "_bytes"), ("_ms", "_s"), ("_us", "_s"),
              ("_Gbps", "_Bps"), ("_GBps", "_Bps"))
UNIT_NOTES = {"_mib": "In MiB, or a size (512K, 25M).", "_MiB": "In MiB, or a size (512K, 4M).",
              "_GiB": "In GiB, or a size (80G).", "_ms": "In milliseconds.", "_us": "In microseconds.",
              "_Gbps": "In Gbit/s.", "_GBps": "In GB/s (10^9 bytes per second)."}
"""What a key's unit suffix says, added to its field's docstring (the field holds SI units)."""

WRITTEN: dict[str, str] = {
    "workload.model": "A zoo model (`scalebench list models`), or 'decoder' (the parameterised transformer, with "
                      "architecture); with layers or layers_file: any name, the model's name in the results.",
    "workload.optimizer": "The optimizer whose state the memory check counts and whose step the iteration pays.",
    "workload.layers": "An inline layer table: a list of {layer, kind, param_count, fwd_flops, bwd_flops, "
                       "activation_elems[, fwd_time_s, bwd_time_s]}, per sample.",
    "workload.layers_file": "A CSV layer table written by `scalebench layers` (relative to this file).",
    "workload.seq_len": "Tokens per sample of a transformer model (bert_*, gpt2_*, llama2_*, decoder).",
    "workload.architecture": "A transformer's dimensions, over the preset's (any key), or all of them for "
                             "model: decoder.",
    "architecture.family": "bert (post-norm encoder), gpt2 (pre-norm decoder, learned positions, tied head) or "
                           "llama (RMSNorm, SwiGLU, rotary positions, untied head; the default).",
    "architecture.layers": "Transformer blocks.",
    "architecture.hidden": "Model width (d_model); a multiple of heads.",
    "architecture.heads": "Attention heads (query heads).",
    "architecture.ffn_hidden": "Width of the MLP's hidden layer (default: 4 x hidden, or Llama's SwiGLU rule).",
    "architecture.vocab": "Vocabulary size (rows of the token embedding and the output head).",
    "architecture.tied_embeddings": "The output head shares the token embedding's weight (gpt2, bert).",
    "cluster.gpus": "World size: GPUs in the job (ranks), spread over nodes of gpus_per_node.",
    "cluster.nodes": "Nodes, instead of gpus (gpus = nodes x gpus_per_node).",
    "cluster.gpus_per_node": "GPUs per node, joined by intra_link; nodes are joined by inter_link.",
    "cluster.gpu": "The accelerator: a GPU of the built-in catalog (`scalebench list gpus`), or one defined under "
                   "catalog: in this file or a --catalog file.",
    "cluster.intra_link": "The link between the GPUs of a node (`scalebench list links`: NVLink, PCIe, ...).",
    "cluster.inter_link": "The link between nodes, through each node's NICs (`scalebench list links`: TCP over "
                          "Ethernet, RoCE, InfiniBand, ...).",
    "cluster.nics_per_node": "Inter-node NICs per node (rails); each carries inter_link's rate.",
    "cluster.host": "The nodes' CPU side (`scalebench list hosts`): its TCP copy rate, memcpy, host reduction and "
                    "PCIe link.",
    "cluster.oversubscription": "Switch oversubscription between nodes (1: non-blocking).",
    "cluster.topology": "The fabric: single_switch (default), fat_tree, rail_optimized (their defaults), a fabric "
                        "YAML file, or a mapping of kind, tiers, radix, oversubscription, link, routing "
                        "(docs/topology.md).",
    "cluster.placement": "Where the job's nodes sit on the fabric: contiguous (default), random (seeded by "
                         "simulation.seed) or a list of host slots.",
    "strategy.kind": "data_parallel, pipeline, tensor or hybrid (set by tp and pp greater than 1).",
    "strategy.error_feedback": "Keep each codec's quantisation error and add it to the next iteration's gradient "
                               "(Seide et al. 2014): an extra memory pass per element.",
    "strategy.ps_placement": "With collective=ps: how the model is split over the servers: sharded (every server "
                             "1/P of every tensor), round_robin (whole layers in turn), mxnet_keys (MXNet's "
                             "kvstore: big arrays split, small ones whole).",
    "simulation.fidelity": "fast (identical ranks simulated once, collectives in closed form) or detailed (every "
                           "rank and every flow on the network).",
    "simulation.seed": "Random seed: jitter, faults, data, ECMP hashes, random placement.",
    "simulation.check_memory": "Refuse a layout that does not fit in the GPU's memory (default true).",
    "simulation.flow_engine": "Detailed fidelity: auto, event (every message an event) or periodic (rings solved "
                              "as periodic schedules in closed form).",
    "heterogeneity.slow_factor": "How many times slower the slow nodes compute (>= 1).",
    "faults.fail_rank": "The rank that fails (a multi-iteration run: iterations: N).",
    "faults.fail_at_s": "When it fails, simulated seconds from the start (.inf: never).",
    "gpu.peak_tflops": "Peak dense TFLOP/s per compute dtype (fp32 required; tf32, fp16, bf16, fp8, int8).",
    "gpu.memory_bandwidth_GBps": "Device memory bandwidth, GB/s (memory-bound layers and codec passes).",
    "gpu.memory_GiB": "Device memory, GiB (or a size: 80G): what the memory check allows.",
    "gpu.source": "Where the figures come from (a spec sheet, a paper, a measurement).",
    "gpu.base": "A GPU of the catalog this entry derives from; its keys override the base's.",
    "link.kind": "The link's class, which selects its transport model: tcp, roce, infiniband, nvlink, pcie, "
                 "loopback, measured, custom ...",
    "link.per_flow_Gbps": "A cap on one flow (one 5-tuple) that the network enforces (a cloud's per-flow limit).",
    "link.base": "A link of the catalog this entry derives from; its keys override the base's.",
    "link.tc": "Shaping as Linux tc on each host's egress: {rate_Gbps, delay_ms} (the delay adds to every packet's "
               "path, twice to a round trip).",
    "link.source": "Where the figures come from (a spec sheet, a library's source, a measurement).",
    "host.cpu": "The CPU, in words (as /proc/cpuinfo or the vendor names it).",
    "host.pcie_link": "The PCIe link between the host and its GPUs (a pcie link of the catalog).",
    "host.assumed": "The keys of this entry that are assumed rather than measured or cited.",
    "host.source": "Where the figures come from.",
}
"""Descriptions of the keys whose dataclass field carries none (or has another name)."""

SECTIONS: dict[str, str] = {
    "name": "The scenario's name, in results and trace titles (default: from its model and cluster).",
    "description": "Free text, kept with the results.",
    "workload": "What is trained: a zoo model (a name), or {model, batch_size, ...}, or your own layer table.",
    "cluster": "Where: nodes x GPUs, the GPU, the links inside and between nodes, the fabric.",
    "strategy": "How: data, pipeline, tensor parallel degrees, the collective library and algorithm, buckets, "
                "overlap, precision, gradient codec, parameter servers, framework.",
    "simulation": "How it is simulated: fidelity, seed, memory check, flow engine.",
    "heterogeneity": "Stragglers and mixed GPUs (multi-iteration runs): jitter, slow nodes, other GPU types.",
    "variability": "How much identical GPUs differ in speed: synchronous steps wait for the slowest (on by "
                   "default; stragglers: false turns it off).",
    "faults": "A failure and its recovery (multi-iteration runs): which rank, when, checkpoints, restart.",
    "catalog": "Your own GPUs, links and hosts, or overrides of built-in ones (each number with its source); a "
               "name defined here can be used in cluster.",
}
"""The scenario's top-level keys."""


NESTED: dict[str, str] = {
    # a layer table's row (workload.layers; sim.workload.LAYER_COLUMNS)
    "layers.layer": "The row's name (its module's qualified name in a derived table).",
    "layers.name": "The row's name (as layer).",
    "layers.kind": "The module's class (Conv2d, Linear, LayerNorm ...; core: parameter-free matmuls).",
    "layers.param_count": "Parameters the row owns (shared ones count once).",
    "layers.fwd_flops": "Forward FLOPs per sample (2 per multiply-accumulate).",
    "layers.bwd_flops": "Backward FLOPs per sample (input and weight gradients).",
    "layers.activation_elems": "Output elements per sample: what backward keeps and a pipeline stage sends.",
    "layers.fwd_time_s": "Measured forward time of the row at the table's batch (replaces the roofline).",
    "layers.bwd_time_s": "Measured backward time of the row at the table's batch.",
    # cluster.topology's mapping (sim.topology.spec)
    "topology.kind": "single_switch, fat_tree, rail_optimized or file.",
    "topology.tiers": "Switch tiers of a fat tree: 2 or 3.",
    "topology.radix": "Ports per switch.",
    "topology.oversubscription": "Down:up ports at the leaves (a number, or one per tier).",
    "topology.link": "The catalog link of the fabric's cables (default: the inter-node link).",
    "topology.links": "One catalog link per tier of cables, from the leaves up.",
    "topology.hop_latency_us": "Latency a switch adds per hop, microseconds (a number, or one per tier).",
    "topology.routing": "ecmp (a seeded hash per flow and switch), d-mod-k (fat tree) or first (rail, file).",
    "topology.pods": "Pods of a 3-tier fat tree (default: as many as the radix allows).",
    "topology.leaves": "Leaf switches of a 2-tier fat tree (default: as many as the job needs).",
    "topology.path": "A fabric YAML file (switches, cables, host slots: docs/fabric_example.yaml).",
    # a link's tc shaping and its measured NCCL protocol factors
    "tc.rate_Gbps": "The rate tc holds each host's egress to, Gbit/s (the link's line rate if lower).",
    "tc.delay_ms": "Delay tc adds to every packet on each host's egress, milliseconds (a round trip pays it twice).",
    "nccl_protocols.LL": "Factors fitted for NCCL's LL protocol on this link.",
    "nccl_protocols.LL128": "Factors fitted for NCCL's LL128 protocol on this link.",
    "nccl_protocols.Simple": "Factors fitted for NCCL's Simple protocol on this link.",
    "bandwidth_factor": "Measured over predicted bus bandwidth where the link is the bottleneck (1: the model's).",
    "latency_factor": "Measured over predicted latency (1: the model's).",
    # catalog sections
    "catalog.gpus": "GPU name -> its entry (peak_tflops, memory_bandwidth_GBps, memory_GiB, ... or base).",
    "catalog.links": "Link name -> its entry (kind, bandwidth_Gbps or bandwidth_GBps, latency_us, ... or base).",
    "catalog.hosts": "Host name -> its entry (tcp_stream_Gbps, memcpy_GBps, reduce_GBps, pcie_link).",
    "catalog.calibration": "Terms fitted from your own runs (`scalebench calibrate --from-runs`): per-iteration "
                           "overheads, overlap.",
    "calibration.workload": "The model the runs trained (for the record).",
    "calibration.multi_gpu_overhead_ms": "A fixed cost per iteration of every job of more than one GPU, ms.",
    "calibration.inter_node_overhead_ms": "A further fixed cost per iteration where the job spans nodes, ms.",
    "calibration.overlap": "Replaces strategy.overlap where the runs' phase times identified it.",
    "calibration.source": "Where the terms come from.",
    # an experiment's sweep
    "case.label": "The case's name in the results and the plots.",
    "geometric": "start, start x factor, ... up to stop (factor 2 by default).",
    "geometric.start": "The first value.", "geometric.stop": "The last value at most.",
    "geometric.factor": "The ratio between values (default 2).",
    "range": "start, start + step, ... up to stop.",
    "range.start": "The first value.", "range.stop": "The last value at most.", "range.step": "The step (default 1).",
}
"""Descriptions of keys nested below a section's key, by '<parent key>.<key>' (or the key alone)."""


def fill_nested(schema: Any, parent: str = "") -> Any:
    """``schema`` with every undescribed property under a parent key described from NESTED."""
    if isinstance(schema, list):
        return [fill_nested(v, parent) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            props = {}
            for name, sub in value.items():
                text = NESTED.get(f"{parent}.{name}") or NESTED.get(name)
                if isinstance(sub, dict) and text and "description" not in sub:
                    sub = {**sub, "description": text}
                props[name] = fill_nested(sub, name)
            out[key] = props
        elif key == "patternProperties" and isinstance(value, dict):
            out[key] = {pattern: fill_nested(sub, parent) for pattern, sub in value.items()}
        elif key in ("items", "oneOf", "anyOf", "allOf", "additionalProperties", "if", "then", "else"):
            out[key] = fill_nested(value, parent)
        elif key == "$defs" and isinstance(value, dict):
            out[key] = {name: fill_nested(sub, name.split(".")[-1]) for name, sub in value.items()}
        else:
            out[key] = value
    return out


@cache
def attribute_docs(cls: type) -> dict[str, str]:
    """{field: the docstring under it} of a dataclass, read from its source."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    out = {}
    for field, doc in zip(body, body[1:], strict=False):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            out[field.target.id] = " ".join(doc.value.value.split())
    return out


def _classes() -> dict[str, type]:
    from sim.catalog import GPU, Host, Link
    from sim.cluster import Cluster
    from sim.faults import Faults, Heterogeneity, Variability
    from sim.strategy import Strategy
    from sim.transformer import Architecture
    from sim.workload import Workload

    return {"cluster": Cluster, "strategy": Strategy, "gpu": GPU, "link": Link, "host": Host,
            "heterogeneity": Heterogeneity, "faults": Faults, "variability": Variability, "architecture": Architecture, "workload": Workload}


def description(key: str) -> str | None:
    """The description of ``section.key`` (WRITTEN first, else the field's docstring), or None."""
    if key in WRITTEN:
        return WRITTEN[key]
    section, name = key.split(".", 1)
    cls = _classes().get(section)
    if cls is None:
        return None
    docs = attribute_docs(cls)
    if name in docs:
        return docs[name]
    for suffix, field_suffix in UNIT_SWAPS:
        candidate = name[: -len(suffix)] + field_suffix
        if name.endswith(suffix) and candidate in docs:
            return f"{docs[candidate]} {UNIT_NOTES[suffix]}"
    return None


def describe(schema: Any, text: str | None) -> Any:
    """``schema`` with ``description`` set (a $ref keeps its siblings in JSON Schema 2020-12)."""
    if not text or not isinstance(schema, dict):
        return schema
    return {**schema, "description": text}
