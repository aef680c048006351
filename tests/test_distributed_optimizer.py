"""Megatron-LM's distributed optimizer with --overlap-param-gather (strategy.overlap_param_gather):
the exposed part of ZeRO-1/2's parameter allgather, by hand, and through simulate()."""

from __future__ import annotations

import pytest

from sim.config import scenario_from_dict
from sim.engine.plan import overlapped_gather_s
from sim.errors import ConfigError
from sim.simulate import simulate


def test_closed_form_by_hand():
    # 4 buckets of 2.5 s of gather each, 1 s of forward each: the first gather is exposed, each later
    # one overlaps the forward of the bucket before it and 1.5 s of it shows: 2.5 + 3 x 1.5 = 7
    assert overlapped_gather_s(10.0, 4.0, param_bytes=100.0, bucket_bytes=25.0) == pytest.approx(7.0)
    # a forward longer than the gathers hides all but the first bucket's
    assert overlapped_gather_s(2.0, 10.0, param_bytes=100.0, bucket_bytes=25.0) == pytest.approx(0.5)
    # one bucket: nothing to overlap with
    assert overlapped_gather_s(3.0, 10.0, param_bytes=100.0, bucket_bytes=1000.0) == pytest.approx(3.0)
    assert overlapped_gather_s(0.0, 10.0, param_bytes=100.0, bucket_bytes=1.0) == 0.0


def _spec(**strategy):
    return {"workload": {"model": "gpt2_medium", "batch_size": 4},
            "cluster": {"gpus": 16, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3", "inter_link": "ib_hdr",
                        "nics_per_node": 1},
            "strategy": {"precision": "fp16", "zero_stage": 1, "bucket_mib": 25, **strategy}}


def test_overlapped_gather_is_shorter_and_never_longer():
    exposed = simulate(scenario_from_dict(_spec()))
    overlapped = simulate(scenario_from_dict(_spec(overlap_param_gather=True)))
    assert overlapped.iteration_time_s < exposed.iteration_time_s
    # the difference is the hidden part of one allgather, at most the whole gather
    assert exposed.iteration_time_s - overlapped.iteration_time_s <= exposed.exposed_comm_time_s + 1e-12
    pipelined = simulate(scenario_from_dict({**_spec(overlap_param_gather=True), "strategy": {
        "kind": "hybrid", "precision": "fp16", "zero_stage": 1, "overlap_param_gather": True, "tp": 2, "pp": 2, "micro_batches": 2}}))
    plain = simulate(scenario_from_dict({**_spec(), "strategy": {
        "kind": "hybrid", "precision": "fp16", "zero_stage": 1, "tp": 2, "pp": 2, "micro_batches": 2}}))
    assert pipelined.iteration_time_s < plain.iteration_time_s


@pytest.mark.parametrize("stage", [0, 3])
def test_only_with_zero_1_or_2(stage):
    with pytest.raises(ConfigError, match="overlap_param_gather"):
        scenario_from_dict(_spec(zero_stage=stage, overlap_param_gather=True))
    with pytest.raises(ConfigError, match="true or false"):
        scenario_from_dict(_spec(overlap_param_gather="yes"))
