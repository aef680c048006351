"""The development set's second tranche: frameworks of 2017 on real clusters.

Each row becomes the scenario a user would write (a workload from the zoo, a cluster from the
catalog, ``strategy.framework`` naming the framework's preset, compute calibrated to the source's
one-GPU figure: ``sim.calibration.throughput_calibrated_scenario``) and is compared as a scaling
efficiency (percentage points) beside the README's naive floor: compute from the one-GPU
figure, a ring allreduce of the fp32 gradients at the inter-node line rate, no overlap.

- chainermn_2017_frameworks.csv (Akiba, PFN, Feb 2017): ResNet-50, 32 images per GPU, GTX TITAN
  X (Maxwell), 4 per node (1-2 GPU rows: one node with that many), InfiniBand FDR 4X. ChainerMN
  (its 2017 hierarchical communicator, MPI between nodes), CNTK (OpenMPI 1.10.3 + NCCL), both over
  the verbs link; MXNet (ps-lite/ZeroMQ) and TensorFlow 0.12 (gRPC) over IP-over-InfiniBand,
  TensorFlow with n-1 parameter-server tasks on the worker nodes (n nodes, at least one: the
  post's appendix). Intra-node PCIe Gen3 (the post does not say; assumed). Efficiency = the row's
  throughput / (GPUs x that framework's one-GPU throughput). The time-to-100-epochs speedups
  and the 128-GPU training times are printed apart (whole runs: evaluation, data loading).
- goyal_2017_caffe2_gloo.csv (Goyal et al. 2017): ResNet-50, 32 images per P100 (SXM2, 8 per
  Big Basin server over NVLink), 50 GbE between servers (assumed: Gloo's TCP transport; the paper
  names Ethernet, not RDMA). The paper's efficiency is 352 GPUs against one 8-GPU server: ~90 %
  (section 5.5) and 'time per iteration increases by 12 %' (1/1.12 = 89.3 %). Compute from its
  '120 ms' backward on one P100 (section 4.3), the forward in the roofline's proportion.
- horovod_docs_roce.csv (Horovod's docs, 2017-2018): 128 and 512 Pascal GPUs (P100 PCIe, 4 per
  server), 25 GbE RoCE, batch 64; InceptionV3 and ResNet-101 with the one-GPU throughput of the
  same benchmark's figure (horovod_tcp_vs_roce.csv, its 128-GPU ideal bar / 128), VGG-16 with
  TensorFlow's published P100 figure (below). Both versions of the page were written while
  Horovod negotiated point to point (0.10-0.12.1): framework ``horovod``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sim.catalog import Catalog, builtin_catalog
from validation.devset_rows import Prediction, horovod_scenario

IPOIB_LINK = "ipoib_fdr_datagram"
"""MXNet's ps-lite (ZeroMQ) and TensorFlow 0.12's gRPC ran over IP-over-InfiniBand on the post's FDR
fabric. Datagram mode assumed: the mode the kernel's ib_ipoib starts an interface in
(Documentation/infiniband/ipoib.rst: the mode is set through /sys/class/net/<if>/mode; connected
mode needs the administrator or a distribution's setting, such as MLNX_OFED's SET_IPOIB_CM); the
post does not say. ``ipoib_fdr_connected`` is the alternative (docs/validation.md gives both)."""
CHAINERMN_HOST = "xeon_e5_2623v3_x2"
"""The post's appendix: 'CPU: 2 * Intel(R) Xeon(R) CPU E5-2623 v3 @ 3.00GHz' per node."""
CHAINERMN_DATA = "imagenet_jpeg_256"
"""The post's appendix: 'ImageNet-1k (1,281,158 images, already resized to 256x256 pixels before
training)'; every framework of the comparison read it (the rows' config: 'ImageNet real data')."""
GOYAL_HOST = "broadwell_ep_x2"
"""Big Basin's head node: the paper names its GPUs and network, not its CPUs (assumed: a
two-socket Broadwell-EP server of 2017, sim/data/hosts.yaml)."""

CHAINERMN_FRAMEWORKS = {  # the CSV's framework -> (preset, inter-node link)
    "ChainerMN": ("chainermn_2017", "ib_fdr"),
    "CNTK": ("cntk", "ib_fdr"),
    "MXNet": ("mxnet_ps", IPOIB_LINK),
    "TensorFlow": ("tf_ps_0.12", IPOIB_LINK),
}
IMAGENET_TRAIN_IMAGES = 1_281_167
"""ImageNet-1k's training set (ILSVRC 2012); the post's appendix says 1,281,158 after its resize."""
VGG16_P100_IMAGES_PER_S = 154.0
"""tf_cnn_benchmarks VGG16 on one P100 (DGX-1, synthetic data, batch 64, May 2017):
tensorflow/tensorflow tensorflow/docs_src/performance/benchmarks.md (commit 5984ffef), 'Training
synthetic data' table (the same table gives ResNet-50 219, InceptionV3 142)."""


def devset_catalog() -> Catalog:
    """The built-in catalog: every link and host the rows name is an entry of it."""
    return builtin_catalog()


def _number(text: str) -> float:
    """'267 (occluded, low conf.)' -> 267; '~90' -> 90; '>16' -> 16."""
    m = re.search(r"[\d.]+", text)
    if not m:
        raise ValueError(text)
    return float(m.group(0))


def grad_bytes(model: str) -> float:
    from sim.workload import workload_from_dict

    return workload_from_dict({"model": model}).param_count * 4.0


def naive_efficiency(t1_s: float, grad_bytes_fp32: float, gpus: int, line_gbps: float) -> float:
    """The README's floor: t1 / (t1 + 2(n-1)/n S / B), B the inter-node line rate, no overlap."""
    if gpus <= 1:
        return 1.0
    comm = 2 * (gpus - 1) / gpus * grad_bytes_fp32 / (line_gbps * 1e9 / 8)
    return t1_s / (t1_s + comm)


# -- ChainerMN's comparison ----------------------------------------------------------------

def chainermn_spec(framework: str, gpus: int) -> dict[str, Any]:
    """The scenario dict of one ChainerMN-post row, as a user would write it."""
    preset, link = CHAINERMN_FRAMEWORKS[framework]
    per_node = min(4, gpus)
    nodes = gpus // per_node
    strategy: dict[str, Any] = {"framework": preset, "precision": "fp32"}
    if preset == "tf_ps_0.12":
        strategy["ps_servers"] = max(1, nodes - 1)  # 'The number of parameter servers are n - 1'
    if preset == "mxnet_ps":
        strategy["ps_servers"] = nodes  # tools/launch.py: as many servers as workers, one per machine
    return {
        "name": f"chainermn2017-{framework}-{gpus}",
        "workload": {"model": "resnet50", "batch_size": 32, "data": CHAINERMN_DATA},
        "cluster": {"gpus": gpus, "gpus_per_node": per_node, "gpu": "titan_x_maxwell", "intra_link": "pcie3",
                    "inter_link": link, "host": CHAINERMN_HOST},
        "strategy": strategy,
    }


def chainermn_scenario(framework: str, gpus: int, single_gpu_samples_per_s: float):
    from sim.calibration import throughput_calibrated_scenario

    return throughput_calibrated_scenario(chainermn_spec(framework, gpus),
                                          {"single_gpu_samples_per_s": single_gpu_samples_per_s, "batch_size": 32},
                                          devset_catalog())


def chainermn_predictions(data_dir: Path, read) -> list:
    from sim.simulate import simulate

    rows = read(data_dir / "chainermn_2017_frameworks.csv")
    base = {r["framework"]: float(r["baseline_1gpu"]) for r in rows if r["metric"] == "throughput" and r["baseline_1gpu"]}
    s_bytes = grad_bytes("resnet50")
    out = []
    cache: dict[tuple[str, int], tuple[float, Any, Any]] = {}

    def run(framework: str, gpus: int) -> tuple[float, Any, Any]:
        """(predicted efficiency, scenario, result): the scenario and result ride along for --explain."""
        if (framework, gpus) not in cache:
            scenario = chainermn_scenario(framework, gpus, base[framework])
            result = simulate(scenario)
            cache[(framework, gpus)] = (result.throughput_samples_per_s / (gpus * base[framework]), scenario, result)
        return cache[(framework, gpus)]

    def predicted(framework: str, gpus: int) -> float:
        return run(framework, gpus)[0]

    for r in rows:
        framework, gpus = r["framework"], int(r["gpus"])
        if framework not in CHAINERMN_FRAMEWORKS or gpus < 2:
            continue
        t1 = 32 / base[framework]
        naive = naive_efficiency(t1, s_bytes, gpus, float(r["inter_node_gbps"]))
        if r["metric"] == "throughput":
            measured = _number(r["value"]) / (gpus * base[framework])
            eff, scenario, result = run(framework, gpus)
            out.append(Prediction(f"chainermn2017 {framework}", f"{gpus} GPUs", measured, eff,
                                  naive, "eff", gated=True, gpus=gpus, scenario=scenario, result=result,
                                  measured_iteration_s=gpus * 32 / _number(r["value"])))
        elif r["metric"] == "speedup":
            out.append(Prediction(f"chainermn2017 {framework} (100-epoch speedup)", f"{gpus} GPUs",
                                  _number(r["value"]) / gpus, predicted(framework, gpus), naive, "eff", gated=False,
                                  gpus=gpus))
        elif r["metric"] == "time to train":
            images_per_s = 100 * IMAGENET_TRAIN_IMAGES / (_number(r["value"]) * 3600)
            out.append(Prediction("chainermn2017 100 epochs on 128 GPUs", f"{framework}",
                                  images_per_s / (gpus * base[framework]), predicted(framework, gpus), naive, "eff",
                                  gated=False))
    return out


# -- Goyal et al.: Caffe2 + Gloo -----------------------------------------------------------

GOYAL_BACKWARD_S = 0.120
"""Section 4.3: 'the backward pass ... 120 ms' for ResNet-50 at 32 images on one P100."""


def goyal_spec(gpus: int) -> dict[str, Any]:
    return {
        "name": f"goyal2017-resnet50-{gpus}",
        "workload": {"model": "resnet50", "batch_size": 32, "data": "imagenet_jpeg"},
        "cluster": {"gpus": gpus, "gpus_per_node": 8, "gpu": "p100", "intra_link": "nvlink1", "inter_link": "tcp_50gbe",
                    "host": GOYAL_HOST},
        "strategy": {"framework": "caffe2_gloo", "precision": "fp32"},
    }


def goyal_single_gpu_iteration_s(backward_s: float = GOYAL_BACKWARD_S) -> float:
    """One P100's iteration from the paper's backward time: the forward in the roofline's
    proportion to the backward, plus the modelled optimizer step."""
    from sim.calibration import _layer_and_optimizer_s
    from sim.config import scenario_from_dict

    spec = {**goyal_spec(1), "cluster": {**goyal_spec(1)["cluster"], "gpus": 1, "gpus_per_node": 1}}
    times, optimizer_s = _layer_and_optimizer_s(scenario_from_dict(spec), 32)
    fwd, bwd = sum(t[0] for t in times), sum(t[1] for t in times)
    return backward_s * (fwd + bwd) / bwd + optimizer_s


def goyal_scenario(gpus: int):
    from sim.calibration import throughput_calibrated_scenario

    return throughput_calibrated_scenario(goyal_spec(gpus), {"single_gpu_iteration_time_s": goyal_single_gpu_iteration_s(),
                                                             "batch_size": 32})


def goyal_predictions(data_dir: Path, read) -> list:
    from sim.simulate import simulate

    rows = read(data_dir / "goyal_2017_caffe2_gloo.csv")
    t8 = simulate(goyal_scenario(8)).iteration_time_s
    t352 = simulate(goyal_scenario(352)).iteration_time_s
    predicted = t8 / t352
    t1 = goyal_single_gpu_iteration_s()
    # the floor: one server's time from the one-GPU figure (no intra-server cost), plus the ring at 50 Gbit/s
    naive = t1 / (t1 + 2 * (44 - 1) / 44 * grad_bytes("resnet50") / (50e9 / 8))
    out = []
    for r in rows:
        if r["metric"] == "scaling efficiency":
            measured = _number(r["value"]) / 100
            case = "352 vs 8 GPUs (~90 %, section 5.5)"
        elif r["metric"] == "increase in time per iteration":
            measured = 1 / (1 + _number(r["value"]) / 100)
            case = "352 vs 8 GPUs (time per iteration +12 %)"
        else:
            continue
        out.append(Prediction("goyal2017 caffe2+gloo ResNet-50", case, measured, predicted, naive, "eff", gated=True,
                              gpus=352))
    return out


# -- Horovod's documented 128 and 512 GPUs ------------------------------------------------

HOROVOD_DOCS_MODELS = {"InceptionV3": "inception_v3", "ResNet-101": "resnet101", "VGG-16": "vgg16"}


def horovod_docs_per_gpu(data_dir: Path, read) -> dict[str, float]:
    """One GPU's images/s per model: the Uber figure's 128-GPU ideal bar / 128 (the same
    benchmark and hardware), VGG-16 from TensorFlow's published P100 figure."""
    rows = read(data_dir / "horovod_tcp_vs_roce.csv")
    per_gpu = {r["model"]: float(r["value"]) / int(r["gpus"]) for r in rows
               if r["config"].startswith("ideal") and int(r["gpus"]) == 128}
    per_gpu.setdefault("VGG-16", VGG16_P100_IMAGES_PER_S)
    return per_gpu


def horovod_docs_predictions(data_dir: Path, read) -> list:
    from sim.simulate import simulate

    per_gpu = horovod_docs_per_gpu(data_dir, read)
    out = []
    for r in read(data_dir / "horovod_docs_roce.csv"):
        model = HOROVOD_DOCS_MODELS.get(r["model"])
        if model is None:
            continue
        gpus = int(r["gpus"])
        scenario = horovod_scenario(model, gpus, "roce_25g", per_gpu[r["model"]])
        result = simulate(scenario)
        predicted = result.throughput_samples_per_s / (gpus * per_gpu[r["model"]])
        naive = naive_efficiency(64 / per_gpu[r["model"]], grad_bytes(model), gpus, float(r["inter_node_gbps"]))
        measured = _number(r["value"]) / 100
        # weak scaling: efficiency = T1 / TN, so TN = one GPU's 64 images / (its images/s x efficiency)
        out.append(Prediction("horovod docs RoCE 128-512", f"{r['model']} {gpus} GPUs", measured,
                              predicted, naive, "eff", gated=True, gpus=gpus, scenario=scenario, result=result,
                              measured_iteration_s=64 / (per_gpu[r["model"]] * measured)))
    return out


def second_tranche_predictions(data_dir: Path, read) -> list:
    return (chainermn_predictions(data_dir, read) + goyal_predictions(data_dir, read)
            + horovod_docs_predictions(data_dir, read))
