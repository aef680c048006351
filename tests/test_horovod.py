"""Horovod's 2017 mechanisms (sim/costs/fusion.py, sim/engine/plan.py fusion_batches): the fusion
rule as its coordinator applies it, the fusion-buffer copies, and a whole iteration's timeline
computed by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.catalog import GPU
from sim.config import scenario_from_dict
from sim.costs.fusion import fusion_copy_s, horovod_fusion_batches
from sim.engine.plan import build_plan
from sim.simulate import simulate
from sim.units import MIB

# -- the fusion rule -------------------------------------------------------------------------


def test_fusion_fills_a_batch_up_to_the_threshold_and_never_past_it():
    # 40 + 24 = 64 fits exactly (tensor_size + new_tensor_size <= threshold); 64 + 1 does not
    assert horovod_fusion_batches([40 * MIB, 24 * MIB, 1 * MIB], 64 * MIB) == [[0, 1], [2]]


def test_fusion_never_skips_a_tensor_that_does_not_fit():
    # the 30 MiB tensor ends the first batch; the 1 MiB one after it is not pulled forward into
    # it although it would fit ("Don't try to fuse additional tensors ... skipping tensors may
    # mean that the batch will have to wait longer")
    assert horovod_fusion_batches([40 * MIB, 30 * MIB, 1 * MIB], 64 * MIB) == [[0], [1, 2]]


def test_a_tensor_larger_than_the_threshold_is_a_batch_of_its_own():
    assert horovod_fusion_batches([1 * MIB, 100 * MIB, 2 * MIB], 64 * MIB) == [[0], [1], [2]]


def test_layers_without_gradients_join_the_current_batch():
    assert horovod_fusion_batches([0, 10 * MIB, 0, 60 * MIB, 0], 64 * MIB) == [[0, 1, 2], [3, 4]]


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 200), min_size=1, max_size=60), threshold=st.integers(1, 300))
def test_fusion_invariants(sizes, threshold):
    batches = horovod_fusion_batches(sizes, threshold)
    # every tensor exactly once, in order: batches are consecutive runs of the request order
    assert [i for b in batches for i in b] == list(range(len(sizes)))
    for k, batch in enumerate(batches):
        total = sum(sizes[i] for i in batch)
        # only a lone tensor (with any zero-byte neighbours) may exceed the threshold
        assert total <= threshold or sum(1 for i in batch if sizes[i] > 0) == 1
        # greedy: the next batch's first tensor did not fit into this one
        if k + 1 < len(batches):
            assert total + sizes[batches[k + 1][0]] > threshold


def test_fusion_buffer_copies_read_and_write_the_batch_twice():
    gpu = GPU(name="g", peak_flops={"fp32": 1e12}, memory_bandwidth_Bps=732e9, memory_bytes=16e9)
    # P100's 732 GB/s (datasheet): 64 MiB in and out = 4 x 64 MiB / 732 GB/s = 0.367 ms
    assert fusion_copy_s(64 * MIB, 2, gpu) == pytest.approx(4 * 64 * MIB / 732e9)
    assert fusion_copy_s(64 * MIB, 2, gpu) == pytest.approx(0.3667e-3, rel=1e-3)
    # a single tensor is reduced in place: no copy
    assert fusion_copy_s(64 * MIB, 1, gpu) == 0.0
    assert fusion_copy_s(0, 5, gpu) == 0.0


# -- a whole iteration by hand ---------------------------------------------------------------

def three_layer_horovod(cycle_time_ms: float = 5.0, world: int = 2, link_GBps: float = 1.0):
    """fwd 1 ms per layer, bwd 2 ms per layer; l1 1000, l2 1000, l3 3000 fp32 parameters;
    Horovod with a fusion threshold of 16000 B; a plain alpha-beta link (10 us, ``link_GBps``)."""
    return scenario_from_dict({
        "name": "horovod-hand",
        "workload": {"layers": [
            {"name": "l1", "param_count": 1000, "fwd_time_s": 1e-3, "bwd_time_s": 2e-3},
            {"name": "l2", "param_count": 1000, "fwd_time_s": 1e-3, "bwd_time_s": 2e-3},
            {"name": "l3", "param_count": 3000, "fwd_time_s": 1e-3, "bwd_time_s": 2e-3},
        ], "batch_size": 4, "optimizer": "sgd"},
        "cluster": {"gpus": world, "gpus_per_node": world, "gpu": "testgpu", "intra_link": "testlink", "inter_link": "testlink"},
        "strategy": {"framework": "horovod", "fusion_mib": 16000 / MIB, "cycle_time_ms": cycle_time_ms},
        "catalog": {
            "gpus": {"testgpu": {"peak_tflops": {"fp32": 1.0}, "memory_bandwidth_GBps": 1200, "memory_GiB": 16,
                                 "efficiency": 1.0}},
            "links": {"testlink": {"bandwidth_GBps": link_GBps, "latency_us": 10, "efficiency": 1.0}},
        },
        "variability": {"stragglers": False},  # the hand-computed timeline of one rank at nominal speed
    })


def test_horovod_timeline_by_hand():
    """Backward order l3 (12000 B), l2 (4000 B), l1 (4000 B); threshold 16000 B:
    batch 0 = l3 + l2 (12000 + 4000 = 16000 fits), batch 1 = l1 (16000 + 4000 does not).

    Forward 0-3 ms; backward l3 3-5, l2 5-7, l1 7-9 ms. All gradients are requested in the
    first cycle, its tick at 3 ms + 5 ms = 8 ms; then the 2017 coordinator's negotiation (rank 0
    receives (N-1)(T+1) = 4 requests at 1.2 us after the link's 10 us, and sends each batch's
    response to the other rank, 8.7 us): batch 0 may start at 8 ms + 14.8 us + 8.7 us.
    batch 0: its data is ready at 7 ms (WAIT_FOR_DATA): it starts at 8.0235 ms.
      ring of 2 on 1 GB/s, 10 us: 2 (10 us + 8000 B / 1 GB/s) = 36 us; two tensors, so the
      fusion-buffer copies add 4 x 16000 B / 1200 GB/s = 53.33 ns.
    batch 1: released at 8 ms + 14.8 + 17.4 us, ready at 9 ms (the end of backward), one tensor
      (no copy): 2 (10 + 2) us = 24 us.
    optimizer (sgd): 3 x 5000 x 4 B / 1.2e12 B/s = 50 ns after the last batch.
    """
    r = simulate(three_layer_horovod())
    b0, b1 = r.buckets
    assert (b0.first_layer, b0.last_layer, b0.n_bytes) == ("l3", "l2", 16000)
    assert (b1.first_layer, b1.last_layer, b1.n_bytes) == ("l1", "l1", 4000)
    start0 = 8e-3 + 14.8e-6 + 8.7e-6
    assert b0.ready_s == pytest.approx(7e-3) and b0.start_s == pytest.approx(start0, rel=1e-12)
    assert b0.end_s == pytest.approx(start0 + 36e-6 + 4 * 16000 / 1200e9, rel=1e-12)
    assert b1.ready_s == pytest.approx(9e-3) and b1.start_s == pytest.approx(9e-3)
    assert b1.end_s == pytest.approx(9e-3 + 24e-6, rel=1e-12)
    assert r.iteration_time_s == pytest.approx(9e-3 + 24e-6 + 50e-9, rel=1e-12)
    assert r.exposed_comm_time_s == pytest.approx(24e-6, rel=1e-6)


def test_horovod_batch_ready_after_the_tick_starts_when_its_data_is_ready():
    """With a 1 ms cycle the tick (4 ms) comes before batch 0's data (7 ms): WAIT_FOR_DATA
    decides, the batch starts at 7 ms."""
    r = simulate(three_layer_horovod(cycle_time_ms=1.0))
    assert r.buckets[0].start_s == pytest.approx(7e-3)
    assert r.buckets[0].end_s == pytest.approx(7e-3 + 36e-6 + 4 * 16000 / 1200e9, rel=1e-12)


def test_batches_queue_on_horovods_one_stream():
    """A batch whose data is ready while the previous one is still reducing waits for it
    (docs/timeline: QUEUE): on a slow link batch 1 starts when batch 0 ends, not at 9 ms."""
    r = simulate(three_layer_horovod(link_GBps=0.001))
    b0, b1 = r.buckets
    # batch 0: 2 (10 us + 8000 B / 1 MB/s) = 16.02 ms, from 8 ms to past 9 ms
    assert b0.end_s > 9e-3
    assert b1.start_s == pytest.approx(b0.end_s, rel=1e-12)


def test_one_rank_has_no_fusion_copies_and_no_communication():
    plan = build_plan(three_layer_horovod(world=1))
    assert plan.bucket_comm_s == (0.0, 0.0)
