"""The input pipeline: the host's cores decoding and augmenting real images for the GPUs.

A job that trains on real images (``workload.data``, a key of ``DATASETS``; ``synthetic``, the
default, reads nothing) has its loader (``strategy.data_loader``, a key of ``LOADERS``, or its
framework's) decode and augment every image on the node's CPU cores, ahead of the GPUs (every
loader here prefetches: the next batch is prepared while the GPUs compute this one). So one
iteration of a node takes

    T = max(T_gpu, T_data),   T_data = g x b x c / K

(g GPUs per node, b images per GPU, c core-seconds per image for that loader and dataset,
``LOADERS[...].core_s_per_image``; K the cores the loader's workers get). The workers share the
node's ``cores`` (sim/data/hosts.yaml) with the training processes, each of which keeps a core
busy: CUDA's default scheduling (cudaDeviceScheduleAuto) spins on a core while it waits for the
GPU whenever the active contexts do not outnumber the logical processors (CUDA Runtime API,
cudaSetDeviceFlags). With W workers and P trainer processes on C cores, Linux's CFS shares the
cores equally among runnable threads ('an ideal, precise multi-tasking CPU': kernel
Documentation/scheduler/sched-design-CFS.rst), so

    K = W                     if W + P <= C
    K = C x W / (W + P)       otherwise.

What a loader costs per image is the pipeline its framework's ImageNet example runs, rebuilt and
measured on one core of this machine (scripts/measure_input_pipeline.py; results/hosts/
input_pipeline_epyc_vm_2026.md) or taken from the framework's documentation; assumed the same per
core on every host (no per-CPU figure of these pipelines was found). The host-to-device copy of a
batch (b x 3 x 224 x 224 float32 = 19 MB at b = 32) is not a term: at a PCIe 3 x16 link's 12 GB/s
it takes 1.6 ms a GPU, and 6.4 ms even if four GPUs shared one x16 upstream port, against
iterations of hundreds of milliseconds where real data matters (docs/model.md).
"""

from __future__ import annotations

from dataclasses import dataclass

DATA_KINDS = ("synthetic", "imagenet_jpeg", "imagenet_jpeg_256")
"""synthetic: tensors made on the GPU, nothing read (tf_cnn_benchmarks' and Horovod's benchmarks);
imagenet_jpeg: ILSVRC-2012's JPEGs as distributed (average 400 x 350 pixels: Deng et al., CVPR
2009); imagenet_jpeg_256: the same resized to 256 x 256 once before training (the ChainerMN 2017
post's set: 'already resized to 256x256 pixels before training')."""


@dataclass(frozen=True)
class Dataset:
    name: str
    pixels: float
    """Pixels of an average image as stored (what a JPEG decode costs in proportion to)."""
    source: str


DATASETS: dict[str, Dataset | None] = {
    "synthetic": None,
    "imagenet_jpeg": Dataset("imagenet_jpeg", 400 * 350, "ILSVRC-2012 training JPEGs, average 400 x 350 (Deng et al., "
                             "'ImageNet: A Large-Scale Hierarchical Image Database', CVPR 2009)"),
    "imagenet_jpeg_256": Dataset("imagenet_jpeg_256", 256 * 256, "ILSVRC-2012 resized to 256 x 256 before training "
                                 "(the ChainerMN 2017 post's appendix; Chainer's ImageNet example expects it)"),
}

MXNET_DOC_IMAGES_PER_S = 1000.0
MXNET_DOC_THREADS = 4
MXNET_DOC_PIXELS = 640 * 480
"""MXNet 0.9.1's docs/how_to/perf.md (apache/mxnet 3a820bf, the commit the ChainerMN post ran):
'By default, MXNet uses 4 CPU threads for decoding images. This is often sufficient to decode
more than 1K images per second', on the RecordIO ImageNet its example packs with 'the short edge
... at least 480px' at quality 95 (example/image-classification/README.md): 480 x 640 for a 4:3
photograph. A lower bound on the rate, so 4 ms a core per image is an upper bound on the cost."""


def _mxnet_doc_core_s(pixels: float) -> float:
    """MXNet's documented figure scaled to another image size in proportion to its pixels
    (assumed: decoding, the larger share, is proportional to the pixels)."""
    return MXNET_DOC_THREADS / MXNET_DOC_IMAGES_PER_S * pixels / MXNET_DOC_PIXELS


MXNET_DOC_CORE_S = {kind: _mxnet_doc_core_s(d.pixels) for kind, d in DATASETS.items() if d is not None}
"""Core-seconds per image of each dataset at MXNet's documented rate: the C++ decode-and-crop loaders' figure."""


@dataclass(frozen=True)
class Loader:
    name: str
    core_s_per_image: dict[str, float]
    """Core-seconds one image costs, per dataset kind (DATA_KINDS other than synthetic)."""
    workers: int | None
    """Worker processes or threads per loader instance; None: one per logical CPU of the host
    (taken here as its cores)."""
    per_node: bool
    """One loader per node (one process drives all of its GPUs, as MXNet's); False: one per
    training process (one per GPU)."""
    source: str


LOADERS: dict[str, Loader] = {
    "pytorch_dataloader": Loader(
        "pytorch_dataloader",
        {"imagenet_jpeg": 2.68e-3, "imagenet_jpeg_256": 2.09e-3},
        workers=4, per_node=False,
        source="PyTorch's ImageNet example (pytorch/examples imagenet/main.py: DataLoader, '-j' 4 workers per process; "
               "PIL decode, RandomResizedCrop(224), flip, ToTensor, Normalize), measured here: 2.68 ms a core per "
               "400 x 350 JPEG, 2.09 ms per 256 x 256 one (scripts/measure_input_pipeline.py, medians of 3 and 2 runs)"),
    "chainer_multiprocess": Loader(
        "chainer_multiprocess",
        {"imagenet_jpeg": 1.47e-3, "imagenet_jpeg_256": 0.82e-3},
        workers=None, per_node=False,
        source="ChainerMN 1.0's ImageNet example (examples/imagenet/train_imagenet.py: MultiprocessIterator, "
               "n_processes=None = multiprocessing.cpu_count() per process; LabeledImageDataset's PIL decode to "
               "float32, CHW, random 224 crop, flip, mean subtracted, x 1/255, pickled to the trainer), measured here: "
               "0.82 ms a core per 256 x 256 JPEG, 1.47 ms per 400 x 350 one (scripts/measure_input_pipeline.py, "
               "medians of 3 and 2 runs)"),
    "mxnet_image_record_iter": Loader(
        "mxnet_image_record_iter",
        MXNET_DOC_CORE_S,
        workers=MXNET_DOC_THREADS, per_node=True,
        source="MXNet 0.9's ImageRecordIter (preprocess_threads 4, example/image-classification --data-nthreads 4; "
               "one process per machine drives its GPUs): docs/how_to/perf.md's '4 CPU threads ... more than 1K "
               "images per second' at 480 x 640, scaled by pixels (MXNET_DOC_IMAGES_PER_S)"),
    "tf_queue_runners": Loader(
        "tf_queue_runners",
        MXNET_DOC_CORE_S,
        workers=4, per_node=False,
        source="TensorFlow 0.12's Inception example (tensorflow/models inception/image_processing.py: "
               "num_preprocess_threads 4 per worker, decode_jpeg and crops in TF ops); per image assumed as MXNet's "
               "C++ decode-and-crop threads (no figure of its own found)"),
    "cpp_thread_pool": Loader(
        "cpp_thread_pool",
        MXNET_DOC_CORE_S,
        workers=None, per_node=False,
        source="a C++ reader decoding on a thread pool as large as the host (CNTK 2.0's ImageDeserializer, Caffe2's "
               "ImageInput: thread counts assumed); per image assumed as MXNet's documented decode-and-crop rate"),
}
DEFAULT_LOADER = "pytorch_dataloader"
"""A strategy with real data whose framework names no loader: PyTorch's DataLoader."""


@dataclass(frozen=True)
class NodeData:
    """One node's input pipeline over one iteration."""

    time_s: float
    """Seconds the node's loader workers need to prepare one iteration's images."""
    images: float
    workers: int
    cores: float
    """Cores the workers get (K above)."""


def loader_cores(workers: int, trainers: int, cores: int) -> float:
    """K: the cores W workers get beside P busy trainer processes on C cores (module docstring)."""
    if workers + trainers <= cores:
        return float(workers)
    return cores * workers / (workers + trainers)


def node_data(data: str, loader_name: str, images: float, trainers: int, host_cores: int,
              workers_per_loader: int | None = None) -> NodeData | None:
    """One node's input pipeline for one iteration (None for synthetic data): T_data = n c / K for
    the node's ``images`` (g x b under data parallelism), ``trainers`` training processes on it
    (one per GPU) and ``host_cores`` cores (module docstring)."""
    dataset = DATASETS[data]
    if dataset is None:
        return None
    loader = LOADERS[loader_name]
    per_loader = workers_per_loader or loader.workers or host_cores
    processes = 1 if loader.per_node else trainers
    workers = per_loader * processes
    cores = loader_cores(workers, processes, host_cores)
    return NodeData(images * loader.core_s_per_image[data] / cores, images, workers, cores)
