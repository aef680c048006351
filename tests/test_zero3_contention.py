"""ZeRO-3's collectives slow the compute they run beside (sim.costs.passes with sim.costs.contention):
the closed form against the event layer's rule, a unit's arithmetic by hand, and whole scenarios
(on/off, additivity, the planner equal to simulate())."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config import scenario_from_dict
from sim.costs.contention import Footprint, PassLoad, beside_comm_s, split_load
from sim.costs.passes import PassOptions, layer_passes
from sim.engine.pipeline_plan import build_pipeline_plan, zero3_unit_comm, zero3_unit_footprints
from sim.simulate import simulate
from sim.workload import Layer

# -- the closed form ---------------------------------------------------------------------------


def test_beside_comm_s_by_hand():
    # 10 s of compute, a factor of 2 while the collective runs
    assert beside_comm_s(10.0, 0.0, 2.0) == 10.0
    assert beside_comm_s(10.0, 4.0, 2.0) == pytest.approx(12.0)  # 4 s at half speed = 2 s of work, 8 s after
    assert beside_comm_s(10.0, 20.0, 2.0) == pytest.approx(20.0)  # the collective outlasts it: all at half speed
    assert beside_comm_s(10.0, 50.0, 2.0) == pytest.approx(20.0)
    assert beside_comm_s(10.0, 4.0, 1.0) == 10.0


def _stepped(compute_s: float, comm_s: float, factor: float, steps: int = 20000) -> float:
    """The event layer's rule by small steps: progress 1 / factor per second while the collective
    runs, 1 after."""
    dt = max(compute_s * factor, comm_s, 1e-12) / steps
    t = done = 0.0
    while done < compute_s - 1e-12:
        rate = 1.0 / factor if t < comm_s else 1.0
        step = min(dt, (compute_s - done) / rate)
        done += rate * step
        t += step
    return t


@settings(max_examples=60, deadline=None)
@given(compute=st.floats(1e-3, 1.0), comm=st.floats(0.0, 3.0), factor=st.floats(1.0, 2.5))
def test_beside_comm_s_is_the_event_rule_and_bounded(compute, comm, factor):
    t = beside_comm_s(compute, comm, factor)
    assert compute - 1e-12 <= t <= compute * factor + 1e-12
    assert t == pytest.approx(_stepped(compute, comm, factor), rel=1e-3, abs=1e-9)
    assert beside_comm_s(compute, comm * 1.5 + 1e-3, factor) >= t - 1e-12  # more beside it never helps


def test_split_load_divides_work_and_grids():
    load = PassLoad(6e-3, 3e-3, 5e-6, ((0.5, 1000), (0.5, None)), 1)
    half = split_load(load, 4)
    assert half.compute_s == pytest.approx(1.5e-3) and half.memory_s == pytest.approx(0.75e-3)
    assert half.launch_s == 5e-6 and half.gemms == ((0.5, 250), (0.5, None))
    assert split_load(PassLoad(1.0, 0.0, 0.0, ((1.0, 5),), 1), 4).gemms == ((1.0, 2),)
    assert split_load(load, 1) is load


# -- one unit by hand ----------------------------------------------------------------------------

SMS = 132
HELD = 12
FACTOR = SMS / (SMS - HELD)  # a grid filling many waves: S / (S - c)
MANY_WAVES = PassLoad(1.0, 0.0, 0.0, ((1.0, None),), 1)
FP = Footprint(HELD, 0.0, SMS, 1.0)


def _passes(gather_s: float, scatter_s: float, footprints=True, tp_comm=0.0):
    layers = [Layer(name=f"block{k}.mlp", kind="Linear", param_count=1000, fwd_flops=1.0, bwd_flops=2.0,
                    activation_elems=10.0) for k in (0, 1)]
    times = [(1.0, 2.0), (1.0, 2.0)]
    units = ["block0", "block1"]
    return layer_passes(layers, times, PassOptions(), [tp_comm, tp_comm], unit_gather_s={"block0": gather_s, "block1": 0.0},
                        unit_scatter_s={"block0": scatter_s}, units=units,
                        unit_footprints={"block0": (FP, FP)} if footprints else None,
                        loads=[(MANY_WAVES, MANY_WAVES)] * 2)


def test_a_units_compute_beside_its_gather_by_hand():
    p = _passes(0.4, 0.3)
    # forward: 1 s of compute, 0.4 s of gather beside it at S / (S - c)
    extra_f = 0.4 * (1 - 1 / FACTOR)
    extra_b = 0.7 * (1 - 1 / FACTOR)  # backward: gather + reduce-scatter beside 2 s
    assert p.fwd_s[0] == pytest.approx(1.0 + extra_f) and p.bwd_s[0] == pytest.approx(2.0 + extra_b)
    assert p.slowdown_s == pytest.approx((extra_f + extra_b, 0.0))
    assert p.fwd_s[1] == 1.0 and p.model_comm_s == (0.0, 0.0)
    # without footprints nothing is slowed
    plain = _passes(0.4, 0.3, footprints=False)
    assert plain.fwd_s[0] == 1.0 and plain.slowdown_s == ()


def test_a_gather_longer_than_the_slowed_compute_sets_the_pass():
    p = _passes(5.0, 0.0)
    # all the compute runs beside it (1 s x factor), and the pass is the gather
    assert p.fwd_s[0] == pytest.approx(5.0)
    assert p.slowdown_s[0] == pytest.approx(1.0 * (FACTOR - 1) + 2.0 * (FACTOR - 1))
    assert p.model_comm_s[0] == pytest.approx(5.0 - FACTOR + 5.0 - 2.0 * FACTOR)


def test_tp_collectives_in_the_stream_take_their_share_of_the_gather():
    # 1 s compute + 0.5 s TP collectives per pass: a 0.3 s gather meets compute for 2/3 of its time
    p = _passes(0.3, 0.0, tp_comm=0.5)
    assert p.slowdown_s[0] == pytest.approx(0.3 * (1 / 1.5) * (1 - 1 / FACTOR) + 0.3 * (2 / 2.5) * (1 - 1 / FACTOR))


# -- whole scenarios ------------------------------------------------------------------------------

def _llama(slows=True, stragglers=False):
    return scenario_from_dict({
        "workload": {"model": "llama2_7b", "architecture": {"layers": 4}, "batch_size": 8},
        "cluster": {"gpus": 32, "gpu": "h100"},
        "strategy": {"kind": "hybrid", "precision": "bf16", "zero_stage": 3, "tp": 2, "micro_batches": 4, "sequence_parallel": True,
                     "comm_slows_compute": slows},
        "variability": {"stragglers": stragglers}})


def test_zero3_pays_for_its_overlap_and_reports_it_as_its_own_term():
    on, off = simulate(_llama()), simulate(_llama(slows=False))
    assert off.overlap_slowdown_time_s == 0.0
    assert on.overlap_slowdown_time_s > 0
    assert on.iteration_time_s > off.iteration_time_s
    # the kernels alone are the same; the slowdown is its own part of the step (and it hides more
    # of the gathers, so less of them is left exposed)
    assert on.compute_time_s - on.model_comm_time_s == pytest.approx(off.compute_time_s - off.model_comm_time_s, rel=1e-9)
    assert on.model_comm_time_s <= off.model_comm_time_s
    assert on.iteration_time_s == pytest.approx(on.compute_time_s + on.overlap_slowdown_time_s
                                                + on.exposed_comm_time_s + on.bubble_time_s, rel=1e-9)


def test_zero3_slowdown_within_the_factor_of_the_overlapped_compute():
    """Never more than (factor - 1) x the compute for the largest factor any layer sees: each unit's
    compute is slowed at most by its own factor."""
    s = _llama()
    plan = build_pipeline_plan(s)
    gather, scatter = zero3_unit_comm(s)
    footprints = zero3_unit_footprints(s, gather, scatter)
    assert footprints and all(f is not None and b is not None for f, b in footprints.values())
    worst = max(max(f.sms / (f.sms - f.sms_held), f.memory_ratio) for pair in footprints.values() for f in pair)
    st = plan.stages[0]
    assert 0 < st.slowdown_s <= (worst - 1) * (st.fwd_s + st.bwd_s - st.slowdown_s)


def test_the_planner_counts_zero3s_slowdown_as_simulate_does():
    from sim.planner import plan_request_from_dict, plan_search
    from sim.planner.verify import FIELDS

    req = plan_request_from_dict({"workload": {"model": "llama2_7b", "architecture": {"layers": 4}},
                                  "cluster": {"gpus": 32, "gpu": "h100"},
                                  "plan": {"global_batch": 64, "zero_stages": [3], "max_pp": 1, "max_gpus": 32,
                                           "bucket_mib": [25]}})
    result = plan_search(req)
    zero3 = [c for c in result.ranked if c.layout.zero_stage == 3 and c.outcome is not None][:3]
    assert zero3 and all(c.outcome.overlap_slowdown_time_s > 0 for c in zero3)
    for c in zero3:
        sim = simulate(scenario_from_dict(c.spec(req)))
        for name in FIELDS:
            assert getattr(c.outcome, name) == getattr(sim, name), (name, c.label())


# -- the copy of a gathered unit into its parameters -------------------------------------------------

def test_a_gathered_units_copy_precedes_each_of_its_passes():
    layers = [Layer(name=f"block{k}.mlp", kind="Linear", param_count=1000, fwd_flops=1.0, bwd_flops=2.0,
                    activation_elems=10.0) for k in (0, 1)]
    p = layer_passes(layers, [(1.0, 2.0)] * 2, PassOptions(), unit_gather_s={"block0": 0.1, "block1": 0.1},
                     unit_scatter_s={}, units=["block0", "block1"], unit_copy_s={"block0": 0.25, "block1": 0.25})
    assert p.fwd_s == pytest.approx((1.25, 1.25)) and p.bwd_s == pytest.approx((2.25, 2.25))
    assert p.model_comm_s == pytest.approx((0.5, 0.5))  # both copies of each one-layer unit


def test_zero3_copy_is_the_units_bytes_read_and_written_at_the_memory_roof():
    """llama2_7b cut to 4 blocks, tp 2, ZeRO-3 over dp 16 on H100s: each block's copy is 2 x its tp
    share in bf16 over the HBM bandwidth."""
    from sim.engine.pipeline_plan import zero3_unit_copy_s

    s = _llama()
    gpu = s.cluster.gpu
    copies = zero3_unit_copy_s(s)
    spans: dict[str, int] = {}
    for layer, unit in zip(s.workload.layers, s.workload.layer_units, strict=True):
        spans[unit] = spans.get(unit, 0) + layer.param_count
    assert set(copies) == set(spans)
    for unit, params in spans.items():
        assert copies[unit] == pytest.approx(2 * params / 2 * 2 / (gpu.memory_bandwidth_Bps / gpu.compute_scale))
    # a block of llama2_7b (202 M parameters): 101 M per tp rank, 404 MB read and written, ~0.12 ms on 3.35 TB/s
    block = max(copies.values())
    assert 0.05e-3 < block < 0.5e-3


def test_explain_sums_a_zero3_step_and_counts_its_slowdown_once():
    """The pipeline engine reports its passes without the slowdown (as the data-parallel path does),
    so `scalebench explain`'s terms add up to the step: compute, the slowdown, the TP collectives and
    ZeRO-3's exposed gathers and copies, the wait for the slowest."""
    from sim.explain import breakdown

    r = simulate(_llama(stragglers=True))
    terms = breakdown(r)
    assert sum(t.seconds for t in terms) == pytest.approx(r.iteration_time_s, rel=1e-9)
    assert r.forward_time_s + r.backward_time_s + r.optimizer_time_s == pytest.approx(r.compute_time_s, rel=1e-12)
    named = {t.name: t.seconds for t in terms}
    assert named["SMs and memory bandwidth taken by collectives"] == r.overlap_slowdown_time_s > 0
    assert named["context/expert/ZeRO-3 communication not hidden"] == r.model_comm_time_s > 0
