"""Measure what one core spends per image in the input pipelines sim/costs/input_pipeline.py models.

    python scripts/measure_input_pipeline.py [--images 200] [--repeats 5]

Each pipeline is rebuilt from its source, with Pillow and numpy (no framework needed), and timed in
CPU seconds of this process (time.process_time: what the image costs a core, whatever else the
machine runs), the median of ``--repeats`` runs over ``--images`` images:

- chainer_256: ChainerMN 1.0's ImageNet example (examples/imagenet/train_imagenet.py,
  PreprocessedDataset over chainer.datasets.LabeledImageDataset) on the 256x256 images the ChainerMN
  2017 post trained on: PIL decode, numpy.asarray(dtype=float32), transpose to CHW, a random
  224x224 crop, a random flip, the mean image subtracted, x 1/255; then the example pickled and
  unpickled (protocol 3), as the worker processes of chainer.iterators.MultiprocessIterator hand
  it to the trainer's process (multiprocessing pickles; the unpickling runs in the trainer).
- chainer_full: the same on 400 x 350 images.
- torchvision_full: PyTorch's ImageNet example (pytorch/examples imagenet/main.py) on full-size
  ImageNet JPEGs: PIL decode and convert('RGB'), RandomResizedCrop(224) (a crop of 8-100 % of the
  area at an aspect of 3/4-4/3, resized bilinearly), RandomHorizontalFlip, ToTensor (uint8 HWC to
  float32 CHW / 255), Normalize; torchvision does the same steps with PIL and a tensor.
- torchvision_256: the same on 256 x 256 images.
- decode_full, decode_256: the JPEG decode alone (Pillow's libjpeg-turbo), for comparison with
  libjpeg-turbo-based C++ loaders.

The test images are the one photograph on this machine, matplotlib's sample_data/grace_hopper.jpg
(512 x 600), resized and saved as JPEG at quality 90 (assumed: ILSVRC's files are Flickr JPEGs whose
quality varies): 400 x 350, ImageNet's average resolution (Deng et al., CVPR 2009; tensorpack's
'Efficient DataFlow' tutorial), and 256 x 256, the post's pre-resized set.
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import platform
import statistics
import time
from pathlib import Path

import numpy as np

SAMPLE = "mpl-data/sample_data/grace_hopper.jpg"
FULL_SIZE = (400, 350)
RESIZED = (256, 256)
CROP = 224
QUALITY = 90
PICKLE_PROTOCOL = 3
"""What multiprocessing pickles with on Python 3.4-3.7 (pickle.DEFAULT_PROTOCOL 3; the example
needs Python >= 3.4 for its forkserver start method)."""
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _sample_photo():
    import matplotlib
    from PIL import Image

    return Image.open(Path(matplotlib.__file__).parent / SAMPLE).convert("RGB")


def _jpeg(image, size) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    image.resize(size, Image.BICUBIC).save(buf, "JPEG", quality=QUALITY)
    return buf.getvalue()


def decode(data: bytes, rng: np.random.Generator) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def chainer_example(data: bytes, rng: np.random.Generator, mean: np.ndarray) -> np.ndarray:
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(data)), dtype=np.float32).transpose(2, 0, 1)
    _, h, w = image.shape
    top, left = int(rng.integers(0, h - CROP)), int(rng.integers(0, w - CROP))
    if rng.integers(0, 2):
        image = image[:, :, ::-1]
    image = image[:, top:top + CROP, left:left + CROP]
    image = image - mean[:, top:top + CROP, left:left + CROP]
    image *= 1.0 / 255.0
    return pickle.loads(pickle.dumps((image, 0), protocol=PICKLE_PROTOCOL))[0]


def torchvision_example(data: bytes, rng: np.random.Generator) -> np.ndarray:
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    w, h = image.size
    area = w * h * rng.uniform(0.08, 1.0)
    ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
    cw, ch = min(w, int(round(np.sqrt(area * ratio)))), min(h, int(round(np.sqrt(area / ratio))))
    left, top = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    image = image.crop((left, top, left + cw, top + ch)).resize((CROP, CROP), Image.BILINEAR)
    if rng.integers(0, 2):
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    tensor = np.asarray(image, dtype=np.float32).transpose(2, 0, 1) / 255.0
    return (tensor - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]


def cpu_s_per_image(fn, data: bytes, images: int, repeats: int) -> list[float]:
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(images):
            fn(data, rng)
        runs.append((time.process_time() - start) / images)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=200, help="images per run (default 200)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per pipeline; the median is printed (default 5)")
    args = parser.parse_args()
    photo = _sample_photo()
    full, resized = _jpeg(photo, FULL_SIZE), _jpeg(photo, RESIZED)
    mean = np.random.default_rng(1).uniform(0, 255, (3, FULL_SIZE[1], FULL_SIZE[0])).astype(np.float32)
    print(f"cpu: {platform.processor() or platform.machine()}; {os.cpu_count()} cores visible; "
          f"python {platform.python_version()}; numpy {np.__version__}; Pillow {__import__('PIL').__version__}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"test JPEGs: {FULL_SIZE[0]}x{FULL_SIZE[1]} {len(full)} bytes, {RESIZED[0]}x{RESIZED[1]} {len(resized)} bytes "
          f"(quality {QUALITY})")
    pipelines = {
        "decode_full": (decode, full),
        "decode_256": (decode, resized),
        "chainer_256": (lambda d, r: chainer_example(d, r, mean), resized),
        "chainer_full": (lambda d, r: chainer_example(d, r, mean), full),
        "torchvision_256": (torchvision_example, resized),
        "torchvision_full": (torchvision_example, full),
    }
    for name, (fn, data) in pipelines.items():
        runs = cpu_s_per_image(fn, data, args.images, args.repeats)
        med = statistics.median(runs)
        print(f"{name}: {med * 1e3:.2f} ms of CPU per image (runs {min(runs) * 1e3:.2f}-{max(runs) * 1e3:.2f}), "
              f"{1 / med:.0f} images/s per core")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
