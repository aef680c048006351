"""The host's input pipeline (sim/costs/input_pipeline.py) and the hosts of each era
(sim/data/hosts.yaml): closed forms by hand, invariants, the iteration bounded by it, its one-line
errors, and what it says about the development set's per-node ceiling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.calibration import throughput_calibrated_scenario
from sim.catalog import builtin_catalog
from sim.config import scenario_from_dict
from sim.costs.input_pipeline import DATASETS, LOADERS, loader_cores, node_data
from sim.errors import ConfigError
from sim.simulate import simulate

CAT = builtin_catalog()
A100_NODE = {"gpus": 8, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3"}


def scenario(data="imagenet_jpeg", batch=256, cluster=None, strategy=None):
    return scenario_from_dict({"workload": {"model": "resnet50", "batch_size": batch, "data": data},
                               "cluster": cluster or A100_NODE,
                               "strategy": strategy or {"framework": "pytorch_ddp", "precision": "bf16"}})


# -- the closed form ----------------------------------------------------------------------

def test_chainer_on_the_posts_node_by_hand():
    """ChainerMN's loader on the post's node (8 cores): 4 training processes, each with
    cpu_count() = 8 worker processes: 32 workers + 4 spinning trainers on 8 cores share them
    (CFS): K = 8 x 32 / 36 = 7.11 cores; 4 x 32 images x 0.82 ms = 105 core-ms / 7.11 = 14.8 ms."""
    d = node_data("imagenet_jpeg_256", "chainer_multiprocess", 128, 4, 8)
    assert d.workers == 32 and d.cores == pytest.approx(8 * 32 / 36)
    assert d.time_s == pytest.approx(128 * 0.82e-3 / (8 * 32 / 36), rel=1e-12)


def test_pytorch_workers_below_the_cores_get_a_core_each():
    """PyTorch's example: 4 workers per process, 8 processes on a DGX A100's 128 cores: 32 + 8 <= 128,
    so K = 32; 8 x 256 full-size JPEGs x 2.68 ms / 32."""
    d = node_data("imagenet_jpeg", "pytorch_dataloader", 8 * 256, 8, 128)
    assert d.cores == 32.0
    assert d.time_s == pytest.approx(2048 * 2.68e-3 / 32, rel=1e-12)
    more = node_data("imagenet_jpeg", "pytorch_dataloader", 8 * 256, 8, 128, workers_per_loader=12)
    assert more.cores == 96.0 and more.time_s == pytest.approx(d.time_s / 3)


def test_mxnet_one_process_per_machine_with_its_documented_threads():
    """ImageRecordIter: one loader per machine with 4 threads; MXNet's '4 threads ... more than 1K
    images per second' at 480 x 640 is 4 ms a thread per image, 256 x 256 images cost 65536/307200 of it."""
    d = node_data("imagenet_jpeg_256", "mxnet_image_record_iter", 128, 4, 8)
    assert d.workers == 4 and d.cores == 4.0  # 4 threads + the one training process fit on 8 cores
    per_image = 4e-3 * 256 * 256 / (640 * 480)
    assert d.time_s == pytest.approx(128 * per_image / d.cores, rel=1e-12)


def test_loader_cores_shares_the_node_fairly():
    assert loader_cores(4, 1, 8) == 4.0  # room for all
    assert loader_cores(16, 4, 8) == pytest.approx(8 * 16 / 20)
    assert loader_cores(1, 7, 8) == 1.0


def test_synthetic_data_reads_nothing():
    assert DATASETS["synthetic"] is None
    assert node_data("synthetic", "pytorch_dataloader", 256, 8, 128) is None


@settings(max_examples=60, deadline=None)
@given(images=st.integers(1, 4096), trainers=st.integers(1, 16), cores=st.integers(1, 256),
       loader=st.sampled_from(sorted(LOADERS)), data=st.sampled_from(["imagenet_jpeg", "imagenet_jpeg_256"]))
def test_more_cores_never_slower_more_images_never_faster(images, trainers, cores, loader, data):
    base = node_data(data, loader, images, trainers, cores)
    assert node_data(data, loader, images, trainers, cores + 1).time_s <= base.time_s * (1 + 1e-12)
    assert node_data(data, loader, images + 1, trainers, cores).time_s >= base.time_s
    assert 0 < base.cores <= cores
    # a full-size JPEG never costs less than a pre-resized one
    assert LOADERS[loader].core_s_per_image["imagenet_jpeg"] >= LOADERS[loader].core_s_per_image["imagenet_jpeg_256"]


# -- the iteration it bounds ------------------------------------------------------------------

def test_the_iteration_is_the_slower_of_the_gpus_and_the_pipeline():
    """Eight A100s at batch 256 in bf16 outrun PyTorch's default loader on full-size JPEGs: the step
    takes the pipeline's 2048 x 2.68 ms / 32 cores = 171.5 ms, the GPUs' own timeline (the synthetic
    run) less; the difference is the wait."""
    real, synthetic = simulate(scenario()), simulate(scenario(data="synthetic"))
    t_data = 2048 * 2.68e-3 / 32
    assert real.data_time_s == pytest.approx(t_data) and real.iteration_time_s == pytest.approx(t_data)
    assert real.data_wait_time_s == pytest.approx(t_data - synthetic.iteration_time_s)
    assert synthetic.data_time_s == 0.0 and synthetic.data_wait_time_s == 0.0
    assert real.exposed_comm_time_s == pytest.approx(synthetic.exposed_comm_time_s)
    # one GPU fed by 4 workers is bound too: weak scaling from a bound baseline
    assert real.baseline_time_s == pytest.approx(256 * 2.68e-3 / 4)


def test_a_pipeline_that_keeps_up_changes_nothing():
    """Twelve workers per GPU (96 cores) keep up with the roofline A100 on 256 x 256 images?
    No wait is added whenever data_time_s <= the GPU timeline."""
    fast = simulate(scenario(data="imagenet_jpeg_256", batch=64,
                             strategy={"framework": "pytorch_ddp", "precision": "fp32", "data_workers": 12}))
    plain = simulate(scenario(data="synthetic", batch=64, strategy={"framework": "pytorch_ddp", "precision": "fp32"}))
    assert fast.data_time_s < plain.iteration_time_s
    assert fast.iteration_time_s == plain.iteration_time_s and fast.data_wait_time_s == 0.0


def test_the_breakdown_says_when_the_pipeline_bounds_the_step(capsys):
    from scalebench.cli import main

    code = main(["simulate", "--model", "resnet50", "--gpus", "8", "--gpus-per-node", "8", "--gpu", "a100",
                 "--intra-link", "nvlink3", "--framework", "pytorch_ddp", "--precision", "bf16", "--batch-size", "256",
                 "--data", "imagenet_jpeg"])
    out = capsys.readouterr().out
    assert code == 0
    assert "waiting for input" in out and "per iteration per node: bounds the step" in out
    main(["simulate", "--model", "resnet50", "--gpus", "8", "--gpus-per-node", "8", "--gpu", "a100",
          "--intra-link", "nvlink3", "--batch-size", "256"])
    assert "input pipeline" not in capsys.readouterr().out  # synthetic: no line


def test_a_multi_iteration_run_is_bounded_too():
    from sim.run import simulate_run

    run = simulate_run(scenario(), 5)
    assert min(run.iteration_times_s) == pytest.approx(2048 * 2.68e-3 / 32)


def test_a_one_gpu_figure_the_host_cannot_feed_is_refused():
    """PyTorch's 4 workers prepare 4 / 2.68 ms = 1493 full-size images a second for one GPU: a
    measured 3000 images/s with that loader contradicts the host and loader named."""
    spec = {"workload": {"model": "resnet50", "batch_size": 256, "data": "imagenet_jpeg"},
            "cluster": {"gpus": 8, "gpus_per_node": 8, "gpu": "a100", "intra_link": "nvlink3"},
            "strategy": {"framework": "pytorch_ddp", "precision": "bf16"}}
    with pytest.raises(ConfigError) as err:
        throughput_calibrated_scenario(spec, {"single_gpu_samples_per_s": 3000, "batch_size": 256})
    assert err.value.field == "calibration.single_gpu_samples_per_s" and "1493" in str(err.value)
    throughput_calibrated_scenario(spec, {"single_gpu_samples_per_s": 1000, "batch_size": 256})


@pytest.mark.parametrize("section, key, value", [
    ("workload", "data", "imagenet_png"), ("strategy", "data_loader", "dali"), ("strategy", "data_workers", 0),
])
def test_bad_pipeline_settings_name_their_field(section, key, value):
    spec = {"workload": {"model": "resnet50"}, "cluster": {"gpus": 1, "gpu": "v100"}, "strategy": {}}
    spec[section][key] = value
    with pytest.raises(ConfigError) as err:
        scenario_from_dict(spec)
    assert err.value.field == f"{section}.{key}"


# -- hosts of each era ----------------------------------------------------------------------

def test_a_cluster_gets_its_gpus_usual_host():
    """A GPU entry names its era's server; a cluster that names no host runs on it; one that names
    a host runs on that; the CPU device keeps the machine the figures were measured on."""
    for gpu, host, cores in [("v100", "dgx1_e5_2698v4", 40), ("a100", "dgx_a100_epyc_7742", 128),
                             ("h100", "dgx_h100_xeon_8480c", 112), ("titan_x_maxwell", "xeon_e5_2623v3_x2", 8)]:
        c = scenario_from_dict({"workload": "resnet50", "cluster": {"gpus": 1, "gpu": gpu}}).cluster
        assert c.host is not None and (c.host.name, c.host.cores) == (host, cores)
    named = scenario_from_dict({"workload": "resnet50", "cluster": {"gpus": 1, "gpu": "v100", "host": "epyc_vm_2026"}})
    assert named.cluster.host.name == "epyc_vm_2026"
    assert scenario_from_dict({"workload": "mlp", "cluster": {"gpus": 1, "gpu": "cpu"}}).cluster.host is None


def test_every_host_says_what_it_assumes_and_has_a_source():
    for name, host in CAT.hosts.items():
        assert host.source and host.cores >= 1, name
        if name != "epyc_vm_2026":
            assert "tcp_stream_Gbps" in host.assumed, name  # no single-stream figure of any of these CPUs
    # one core's traffic from published single-thread STREAM runs (hosts.yaml's header)
    assert CAT.hosts["xeon_e5_2623v3_x2"].reduce_Bps == pytest.approx(19.9e9)
    assert CAT.hosts["dgx1_e5_2698v4"].reduce_Bps == pytest.approx(1.5 * 12e9)


def test_a_gpu_naming_an_unknown_host_is_refused():
    with pytest.raises(ConfigError) as err:
        CAT.extended({"gpus": {"x": {"peak_tflops": {"fp32": 1}, "memory_bandwidth_GBps": 1, "memory_GiB": 1,
                                     "host": "nowhere"}}})
    assert err.value.field == "catalog.gpus.x.host"
    with pytest.raises(ConfigError) as err:
        CAT.extended({"hosts": {"h": {"tcp_stream_Gbps": 8, "memcpy_GBps": 2, "reduce_GBps": 5, "pcie_link": "pcie3"}}})
    assert err.value.field == "catalog.hosts.h.cores"


# -- the development set's per-node ceiling -------------------------------------------------

def test_the_chainermn_posts_input_pipeline_is_not_its_per_node_ceiling():
    """Every framework of the ChainerMN post read the 256 x 256 set on 8 cores per node: at the
    measured per-image cost the loaders prepare thousands of images a second per node, where the
    plot shows 190-290 (ChainerMN 267 at 4 GPUs): no row waits for its input."""
    from validation.devset_frameworks import chainermn_scenario

    for framework, one_gpu in (("ChainerMN", 81.8), ("MXNet", 99.1), ("CNTK", 120.7), ("TensorFlow", 42.4)):
        for gpus in (4, 32):
            r = simulate(chainermn_scenario(framework, gpus, one_gpu))
            assert r.data_wait_time_s == 0.0
            per_node_rate = 4 * 32 / r.data_time_s
            assert per_node_rate > 1000, (framework, gpus, per_node_rate)
