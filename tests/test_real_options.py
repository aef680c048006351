"""The harness takes its strategy from the scenario: one description feeds sim/ and real/."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

from real.config import real_scenario  # noqa: E402
from sim.errors import ConfigError  # noqa: E402


def spec(strategy: dict, real: dict | None = None, gpus: int = 2) -> dict:
    out = {"workload": {"model": "small_cnn", "batch_size": 8}, "cluster": {"gpus": gpus, "gpu": "cpu"}, "strategy": strategy}
    if real is not None:
        out["real"] = real
    return out


@pytest.mark.parametrize("strategy,expected", [
    ({}, ("ddp", "none")),
    ({"codec": "fp16"}, ("ddp", "fp16")),
    ({"codec": "fp8_e4m3"}, ("ddp", "fp8_e4m3")),
    ({"collective": "ps"}, ("ps_sync", "none")),
    ({"collective": "ps", "ps_mode": "async"}, ("ps_async", "none")),
    ({"kind": "pipeline", "pp": 2, "dp": 1, "micro_batches": 4, "schedule": "gpipe"}, ("pipeline", "none")),
])
def test_harness_options_follow_the_scenario_strategy(strategy, expected):
    _, options = real_scenario(spec(strategy))
    assert (options.strategy, options.compression) == expected


def test_pipeline_takes_micro_batches_and_schedule_from_the_strategy():
    _, options = real_scenario(spec({"kind": "pipeline", "pp": 2, "dp": 1, "micro_batches": 2, "schedule": "gpipe"}))
    assert (options.microbatches, options.schedule) == (2, "gpipe")


def test_a_contradicting_real_option_is_an_error():
    with pytest.raises(ConfigError) as info:
        real_scenario(spec({"codec": "fp16"}, {"compression": "int8"}))
    assert str(info.value).startswith("real.compression:") and "fp16" in str(info.value)


def test_real_options_still_choose_where_the_scenario_is_silent():
    _, options = real_scenario(spec({}, {"compression": "bf16"}))
    assert options.compression == "bf16"


def test_an_nccl_run_gets_the_strategys_algorithm_protocol_and_socket_settings():
    """One description: what the simulator forces as NCCL_ALGO / NCCL_PROTO / NCCL_SOCKET_NTHREADS /
    NCCL_NSOCKS_PERTHREAD, a measured NCCL run is given in its ranks' environment (and nothing
    where the strategy leaves the choice to NCCL); torch.distributed's own variables win."""
    from real.config import nccl_environment
    from real.launch import rank_environment
    from sim.config import scenario_from_dict

    def scenario(strategy):
        return scenario_from_dict({"workload": {"model": "resnet50"}, "strategy": strategy,
                                   "cluster": {"gpus": 16, "gpus_per_node": 8, "inter_link": "tcp_100gbe"}})

    env = nccl_environment(scenario({"collective": "tree", "protocol": "LL128", "nccl_socket_nthreads": 4,
                                     "nccl_nsocks_perthread": 2}))
    assert env == {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128", "NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "2"}
    assert nccl_environment(scenario({})) == {}
    assert nccl_environment(scenario({"collective": "hierarchical"})) == {}
    ranks = rank_environment({"env": {**env, "RANK": "99"}}, 3, 4, 12345)
    assert {k: ranks[k] for k in env} == env
    assert (ranks["RANK"], ranks["WORLD_SIZE"], ranks["MASTER_PORT"]) == ("3", "4", "12345")
    assert rank_environment({}, 0, 2, 1).get("NCCL_ALGO") == os.environ.get("NCCL_ALGO")  # a job without env


# -- ranks on CUDA devices (issue 30) --------------------------------------------------------------

def test_where_ranks_compute_follows_the_backend_unless_asked():
    from real.config import resolve_device
    from real.worker import NCCL_PROCESS_GROUP, job_device

    assert job_device({"backend": "nccl"}) == "cuda" and job_device({"backend": "gloo"}) == "cpu"
    assert job_device({"backend": "gloo", "device": "cuda"}) == "cuda"
    assert resolve_device({}, "gloo") == "cpu"
    # NCCL's CUDA tensors and the harness' CPU bookkeeping, each on its backend (torch's device:backend list)
    assert NCCL_PROCESS_GROUP == "cpu:gloo,cuda:nccl"
    with pytest.raises(ConfigError, match="real.device.*cuda with backend nccl"):
        resolve_device({"device": "cpu"}, "nccl")
    with pytest.raises(ConfigError, match="real.device"):
        resolve_device({"device": "tpu"}, "gloo")


def test_cuda_ranks_here_are_refused_and_large_models_need_a_gpu():
    import torch

    from real.config import runnable_models

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="real.device.*cpu here"):
        real_scenario(spec({}, {"device": "cuda"}))
    assert "resnet50" in runnable_models(True) and "resnet50" not in runnable_models(False)
    with pytest.raises(ConfigError, match="workload.model"):
        real_scenario({**spec({}), "workload": {"model": "resnet50"}})


def test_the_hooks_make_their_buffers_on_the_buckets_device():
    """The fp8/int8 path's gather buffer and its fp32 sum live where the bucket lives (on the CPU
    they did anyway: checked on the meta device, which no CPU default can satisfy)."""
    import torch

    from real.strategies.hooks import FORMATS, allgather_decode, allgather_encode

    bucket = torch.empty(10, device="meta")
    payload, gathered, n_q = allgather_encode(bucket, FORMATS["fp8_e4m3"], 2)
    assert payload.device.type == gathered.device.type == "meta"
    assert gathered.numel() == 2 * (10 + 4) and n_q == 10  # one byte per element, the 4-byte scale appended
    assert allgather_decode(bucket, gathered, n_q, FORMATS["fp8_e4m3"], 2).device.type == "meta"
