"""Memory per rank: the ZeRO-style accounting, the pipeline stash, codec buffers, overflow errors."""

from __future__ import annotations

import pytest

from sim.config import scenario_from_dict
from sim.errors import ConfigError
from sim.memory import check_memory, memory_per_rank
from sim.simulate import simulate


def spec(*, params=1_000_000, layers=4, acts=1000, batch=8, gpus=4, per_node=4, gpu="v100", optimizer="adam",
         check=True, **strategy):
    rows = [{"name": f"l{i}", "param_count": params, "fwd_flops": 1e6, "activation_elems": acts} for i in range(layers)]
    return {
        "workload": {"layers": rows, "batch_size": batch, "optimizer": optimizer},
        "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": gpu},
        "strategy": strategy,
        "simulation": {"check_memory": check},
    }


def test_mixed_precision_adam_is_16_bytes_per_parameter():
    """ZeRO (Rajbhandari et al. 2020): fp16 params 2 + grads 2 + fp32 master 4 + Adam moments 8."""
    [b] = memory_per_rank(scenario_from_dict(spec(precision="fp16")))
    assert b.params_bytes + b.grads_bytes + b.optimizer_bytes == 16 * 4_000_000
    [b32] = memory_per_rank(scenario_from_dict(spec(precision="fp32", optimizer="sgd")))
    assert b32.params_bytes + b32.grads_bytes + b32.optimizer_bytes == 8 * 4_000_000
    assert b32.activations_bytes == 8 * 4 * 1000 * 4


def test_tensor_parallel_splits_parameters_and_activations():
    [one] = memory_per_rank(scenario_from_dict(spec()))
    [four] = memory_per_rank(scenario_from_dict(spec(kind="tensor", tp=4)))
    assert four.params_bytes == one.params_bytes / 4
    assert four.activations_bytes == one.activations_bytes / 4


def test_1f1b_stashes_less_than_gpipe():
    """GPipe keeps m micro-batches of activations; 1F1B stage s keeps min(p - s, m)."""
    p, m = 4, 8
    gpipe = memory_per_rank(scenario_from_dict(spec(kind="pipeline", pp=p, micro_batches=m, schedule="gpipe")))
    ofob = memory_per_rank(scenario_from_dict(spec(kind="pipeline", pp=p, micro_batches=m, schedule="1f1b")))
    for s in range(p):
        assert gpipe[s].stash_bytes == (m - 1) * gpipe[s].activations_bytes
        assert ofob[s].stash_bytes == (min(p - s, m) - 1) * ofob[s].activations_bytes
    assert max(b.total_bytes for b in ofob) < max(b.total_bytes for b in gpipe)


def test_allgather_codec_buffer_grows_with_ranks():
    small = memory_per_rank(scenario_from_dict(spec(gpus=4, codec="fp8_e4m3")))[0].codec_bytes
    large = memory_per_rank(scenario_from_dict(spec(gpus=64, per_node=8, codec="fp8_e4m3")))[0].codec_bytes
    fp16 = memory_per_rank(scenario_from_dict(spec(gpus=64, per_node=8, codec="fp16")))[0].codec_bytes
    assert large > small > 0 and fp16 < large
    with_ef = memory_per_rank(scenario_from_dict(spec(gpus=4, codec="int8", error_feedback=True)))[0].codec_bytes
    without = memory_per_rank(scenario_from_dict(spec(gpus=4, codec="int8")))[0].codec_bytes
    assert with_ef - without == 4 * 4_000_000


def test_overflow_names_what_and_by_how_much():
    big = spec(params=1_000_000_000, layers=4, gpu="k80")  # 4e9 params x 16 bytes >> 12 GiB
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(big)
    message = str(err.value)
    assert "\n" not in message and err.value.field == "memory per rank"
    for word in ("params", "optimizer", "over by", "12.0 GiB", "k80"):
        assert word in message
    # the same model fits on 32 h200s split tp 8 x pp 4
    fits = spec(params=1_000_000_000, layers=4, gpu="h200", gpus=32, per_node=8, kind="hybrid", tp=8, pp=4, dp=1)
    scenario = scenario_from_dict(fits)
    assert check_memory(scenario).total_bytes <= scenario.cluster.gpu.memory_bytes
    assert simulate(scenario).memory_bytes == check_memory(scenario).total_bytes


def test_check_can_be_turned_off():
    scenario_from_dict(spec(params=1_000_000_000, gpu="k80", check=False))


def test_parameter_server_workers_keep_no_optimizer_state():
    [ring] = memory_per_rank(scenario_from_dict(spec()))
    [ps] = memory_per_rank(scenario_from_dict(spec(collective="ps", ps_mode="async")))
    assert ring.optimizer_bytes == 8 * 4_000_000 and ps.optimizer_bytes == 0
    assert ps.params_bytes == ring.params_bytes
