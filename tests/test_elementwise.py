"""The memory-bound kernels between a transformer's GEMMs (sim/costs/elementwise.py), by hand.

Expected bytes are written out per kernel from the module's rule (each kernel reads its inputs
and writes its outputs once; fp16 = 2 bytes, a dropout mask 1 byte), not computed by the code."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.catalog import builtin_catalog
from sim.costs.elementwise import elementwise_times_s, layer_elementwise
from sim.costs.passes import PassOptions, layer_passes
from sim.workload import workload_from_dict

GPT = {"family": "gpt2", "layers": 2, "hidden": 1024, "heads": 16, "seq_len": 512, "vocab": 1000}
LLAMA = {"family": "llama", "layers": 2, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn_hidden": 2816,
         "seq_len": 512, "vocab": 1000}


def _workload(arch, batch=2):
    return workload_from_dict({"model": "decoder", "architecture": arch, "batch_size": batch})


def _row(w, suffix):
    return next(x for x in w.layers if x.name.endswith(suffix))


def test_gpt_block_kernels_by_hand():
    w = _workload(GPT)
    arch, b, s, h, a = w.architecture, 2, 512, 1024, 16
    # eager attention: softmax read+write 4 B, dropout read+write 4 B + mask 1 B; backward 5 + 6
    core = layer_elementwise(_row(w, "block0.attn.core"), arch, b, 2, flash=False)
    assert core.fwd_bytes == a * s * s * b * 9
    assert core.bwd_bytes == a * s * s * b * 11
    assert not core.replicated
    assert layer_elementwise(_row(w, "block0.attn.core"), arch, b, 2, flash=True).fwd_bytes == 0
    # bias-dropout-add after the projections: read out + residual, write sum + mask = 7 B; backward 5 B
    for suffix in ("block0.attn.proj", "block0.out"):
        k = layer_elementwise(_row(w, suffix), arch, b, 2, flash=False)
        assert (k.fwd_bytes, k.bwd_bytes, k.replicated) == (s * b * h * 7, s * b * h * 5, True)
    # bias-GeLU over the 4h-wide output: 4 B forward, 6 B backward
    fc = layer_elementwise(_row(w, "block0.fc"), arch, b, 2, flash=False)
    assert (fc.fwd_bytes, fc.bwd_bytes, fc.replicated) == (s * b * 4 * h * 4, s * b * 4 * h * 6, False)
    # the QKV projection and the norms have nothing after them here
    assert layer_elementwise(_row(w, "block0.attn.qkv"), arch, b, 2, flash=False).fwd_bytes == 0
    assert layer_elementwise(_row(w, "block0.ln1"), arch, b, 2, flash=False).fwd_bytes == 0


def test_llama_block_kernels_by_hand():
    w = _workload(LLAMA)
    arch, b, s, h, f = w.architecture, 2, 512, 1024, 2816
    core = layer_elementwise(_row(w, "block0.attn.core"), arch, b, 2, flash=False)
    assert (core.fwd_bytes, core.bwd_bytes) == (16 * s * s * b * 4, 16 * s * s * b * 6)  # no dropout
    for suffix in ("block0.attn.o", "block0.down"):
        k = layer_elementwise(_row(w, suffix), arch, b, 2, flash=False)
        assert (k.fwd_bytes, k.bwd_bytes) == (s * b * h * 6, 0.0)  # residual add; its gradient passes through
    up = layer_elementwise(_row(w, "block0.up"), arch, b, 2, flash=False)
    assert (up.fwd_bytes, up.bwd_bytes) == (s * b * f * 6, s * b * f * 10)  # silu(gate) * up
    assert layer_elementwise(_row(w, "block0.gate"), arch, b, 2, flash=False).fwd_bytes == 0


def test_times_at_the_memory_roof_and_none_without_an_architecture():
    gpu = builtin_catalog().gpus["a100"]
    w = _workload(GPT)
    times = elementwise_times_s(w, 2, gpu, 2, flash=False)
    i = [x.name for x in w.layers].index("block0.fc")
    assert times[i][0] == pytest.approx(512 * 2 * 4096 * 4 / 2039e9, rel=1e-12)
    resnet = workload_from_dict({"model": "resnet50", "batch_size": 2})
    assert all(t == (0.0, 0.0, False) for t in elementwise_times_s(resnet, 2, gpu, 2, flash=False))
    measured = replace(w, layers=tuple(replace(x, fwd_time_s=1e-3, bwd_time_s=2e-3) for x in w.layers))
    assert all(t[:2] == (0.0, 0.0) for t in elementwise_times_s(measured, 2, gpu, 2, flash=False))


def test_replicated_kernels_split_only_with_sequence_parallelism():
    w = _workload(GPT)
    n = len(w.layers)
    times = [(0.0, 0.0)] * n
    ew = [(0.0, 0.0, False)] * n
    i = [x.name for x in w.layers].index("block0.out")
    j = [x.name for x in w.layers].index("block0.fc")
    ew[i] = (8.0, 4.0, True)
    ew[j] = (8.0, 4.0, False)
    plain = layer_passes(w.layers, times, PassOptions(tp=8), elementwise_s=ew)
    assert (plain.fwd_s[i], plain.bwd_s[i]) == (8.0, 4.0)  # whole on every rank
    assert (plain.fwd_s[j], plain.bwd_s[j]) == (1.0, 0.5)  # split with the 4h-wide tensor
    sp = layer_passes(w.layers, times, PassOptions(tp=8, sequence_parallel=True), elementwise_s=ew)
    assert (sp.fwd_s[i], sp.bwd_s[i]) == (1.0, 0.5)
    cp = layer_passes(w.layers, times, PassOptions(tp=1, cp=2), elementwise_s=ew)
    assert cp.fwd_s[i] == 4.0
    # full recomputation runs the forward kernels again before the backward
    full = layer_passes(w.layers, times, PassOptions(tp=1, recompute="full", blocks=frozenset({"block0"})),
                        elementwise_s=ew)
    assert full.bwd_s[i] == 4.0 + 8.0
