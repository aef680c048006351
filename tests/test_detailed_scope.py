"""The detailed mode refuses, in one line naming fidelity fast, every strategy field it does not
simulate per flow (sim/engine/detailed_scope.py): those of today and any added to the strategy
later, without an edit anywhere but the registry."""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass, replace

import pytest

from sim.config import scenario_from_dict
from sim.engine.detailed import check_detailed
from sim.engine.detailed_scope import COVERED, VALUES, check_strategy_scope
from sim.errors import ConfigError
from sim.simulate import simulate
from sim.strategy import Strategy


def scenario(strategy: dict, gpus: int = 8, per_node: int = 4):
    return scenario_from_dict({"workload": {"model": "resnet50"},
                               "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": "v100", "intra_link": "nvlink2",
                                           "inter_link": "tcp_25gbe"},
                               "strategy": strategy, "simulation": {"fidelity": "detailed"}})


@pytest.mark.parametrize("strategy,named", [
    ({"framework": "horovod"}, "strategy.fusion_bytes"),
    ({"fusion_mib": 64}, "strategy.fusion_bytes"),
    ({"collective": "ps", "ps_layout": "colocated"}, "strategy.ps_layout"),
])
def test_a_field_it_does_not_simulate_is_refused_naming_fast(strategy, named):
    with pytest.raises(ConfigError) as err:
        check_detailed(scenario(strategy))
    text = str(err.value)
    assert err.value.field == "simulation.fidelity" and "fast for " + named in text and "\n" not in text
    assert named in err.value.related


def test_a_field_added_to_the_strategy_later_is_refused_without_an_edit():
    """A strategy with a field this module has never heard of (as expert parallelism, ZeRO or an
    interleaved schedule will be): refused when set, accepted at its default."""
    future = make_dataclass("FutureStrategy", [("expert_parallel", int, field(default=1))], bases=(Strategy,),
                            frozen=True, kw_only=True)
    check_strategy_scope(future())
    with pytest.raises(ConfigError, match=r"fast for strategy\.expert_parallel=4"):
        check_strategy_scope(future(expert_parallel=4))


def test_a_covered_field_is_refused_at_a_value_it_does_not_run():
    with pytest.raises(ConfigError, match="the detailed mode runs gpipe and 1f1b"):
        check_strategy_scope(replace(Strategy(), schedule="interleaved_1f1b"))
    assert set(VALUES) <= COVERED


def test_the_registry_names_real_fields_and_leaves_out_what_it_does_not_run():
    """Every covered name is a strategy field; the mechanisms the detailed mode has no per-rank
    schedule for are not covered (so refused when set: test above for a field of any name)."""
    names = {f.name for f in fields(Strategy)}
    assert names >= COVERED
    assert {"fusion_bytes", "cycle_time_s", "ps_layout", "staleness_penalty", "max_staleness"} <= names - COVERED
    assert not {"negotiation", "mpi_gpu_buffers", "ps_rpc", "root_collective", "concurrent_collectives"} & COVERED
    # what the large-model strategy added (H5) is refused without an edit here
    assert not {"cp", "ep", "zero_stage", "vpp", "sequence_parallel", "recompute"} & COVERED


def test_a_large_model_field_is_refused_naming_fast():
    """ZeRO (H5's; its own check may answer first): one line, naming the field and fidelity fast."""
    with pytest.raises(ConfigError, match=r"zero_stage.*fast"):
        check_detailed(scenario({"zero_stage": 1}))


def test_nccls_sms_slow_the_detailed_compute_as_the_fast_paths():
    """comm_slows_compute (on by default since H1): a kernel slows while a bucket's collective runs
    beside it (sim.costs.contention), on the traced ranks and the envelope alike, over the comm
    stream's schedule as the plan costs it: equal to the fast path within 1e-5 on 4 nodes x 8 V100
    over 25 GbE (without the slowdown the two are equal to the last bit). What is left: rank 0
    starts bucket 2 as soon as it leaves bucket 1, and in the detailed mode the two rings overlap
    by a hop's tail, so buckets 2 and 3 end 61.6 us before the plan's costed ends (0.02043 s
    against 0.02050 s each): the slowdown, 1.855 ms, moves by 0.78 us (6.3e-6 of the iteration)."""
    s = scenario({"framework": "pytorch_ddp", "collective": "ring"}, gpus=32, per_node=8)
    assert s.strategy.comm_slows_compute
    detailed, fast = simulate(s), simulate(replace(s, fidelity="fast"))
    unslowed = replace(s, strategy=replace(s.strategy, comm_slows_compute=False))
    plain = simulate(unslowed)
    assert plain.iteration_time_s == pytest.approx(simulate(replace(unslowed, fidelity="fast")).iteration_time_s, rel=1e-12)
    assert detailed.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=1e-5)
    assert detailed.iteration_time_s > plain.iteration_time_s
