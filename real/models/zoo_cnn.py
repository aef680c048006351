"""The zoo's CNNs: torch definitions (real.models.large, real.models.classic), synthetic batches,
losses, and the metadata with sources that ``real.derive`` writes to sim/data/workloads/<name>.yaml."""

from __future__ import annotations

from functools import partial

from torch import nn

from real.models.classic import build_alexnet, build_googlenet
from real.models.large import build_inception_v3, build_resnet, build_vgg16, imagenet_batch
from real.models.small import ModelSpec

FLOP_CONVENTION = "2 FLOPs per multiply-accumulate; torch's FlopCounterMode counts matmuls and convolutions only"

TORCHVISION = "https://pytorch.org/vision/stable/models/generated/torchvision.models.{}.html"
GOYAL = "Goyal et al. 2017, Accurate, Large Minibatch SGD (arXiv:1706.02677)"
CNN_BATCH_NOTE = "32 images per GPU as in " + GOYAL + " (n = 32 per worker)"


def _cnn_zoo(description: str, source: str, batch_note: str, published: dict, optimizer_note: str,
             batch: int = 32) -> dict:
    return {
        "description": description, "source": source, "default_batch_size": batch,
        "default_batch_size_source": batch_note, "optimizer": "momentum", "optimizer_source": optimizer_note,
        "flop_convention": FLOP_CONVENTION, "published": published,
    }


CNN_MODELS: dict[str, ModelSpec] = {
    "resnet50": ModelSpec(
        partial(build_resnet, 50), imagenet_batch(224), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x224x224"},
        zoo=_cnn_zoo(
            "ResNet-50 v1.5 (torchvision layout), 224x224 ImageNet images",
            "He et al. 2016 (arXiv:1512.03385); torchvision.models.resnet50",
            CNN_BATCH_NOTE,
            {"params": 25_557_032, "gmacs": 4.09,
             "source": TORCHVISION.format("resnet50") + " (ResNet50_Weights.IMAGENET1K_V1: num_params 25557032, "
                       "'GFLOPS' 4.09, which counts multiply-accumulates)"},
            "SGD with momentum 0.9 (" + GOYAL + ")",
        ),
    ),
    "inception_v3": ModelSpec(
        build_inception_v3, imagenet_batch(299), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x299x299"},
        zoo=_cnn_zoo(
            "Inception-v3 (torchvision layout) without the auxiliary classifier, 299x299 images",
            "Szegedy et al. 2016 (arXiv:1512.00567); torchvision.models.inception_v3",
            "32 per replica as in Szegedy et al. 2016 section 8 (50 replicas, batch 32 each)",
            {"params": 23_834_568, "params_with_aux_classifier": 27_161_264, "gmacs": 5.71,
             "source": TORCHVISION.format("inception_v3") + " (Inception_V3_Weights.IMAGENET1K_V1: num_params "
                       "27161264 with the auxiliary classifier, 'GFLOPS' 5.71 = multiply-accumulates at 299x299 in "
                       "eval mode, where the auxiliary head does not run); the auxiliary head has "
                       "98560 + 2459136 + 769000 = 3326696 parameters; timm's inception_v3.tv_in1k card: 23.8 M, 5.7 GMACs"},
            "Szegedy et al. trained with RMSProp; the simulator's 'momentum' has the same optimizer memory traffic "
            "(one state array per parameter)",
        ),
    ),
    "vgg16": ModelSpec(
        build_vgg16, imagenet_batch(224), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x224x224"},
        zoo=_cnn_zoo(
            "VGG-16 (configuration D, torchvision layout), 224x224 images",
            "Simonyan and Zisserman 2015 (arXiv:1409.1556); torchvision.models.vgg16",
            CNN_BATCH_NOTE + "; Simonyan and Zisserman used 256 over 4 GPUs (64 each)",
            {"params": 138_357_544, "gmacs": 15.47,
             "source": TORCHVISION.format("vgg16") + " (VGG16_Weights.IMAGENET1K_V1: num_params 138357544, "
                       "'GFLOPS' 15.47 = multiply-accumulates)"},
            "SGD with momentum 0.9 (Simonyan and Zisserman 2015)",
        ),
    ),
    **{f"resnet{depth}": ModelSpec(
        partial(build_resnet, depth), imagenet_batch(224), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x224x224"},
        zoo=_cnn_zoo(
            f"ResNet-{depth} v1.5 (torchvision layout), 224x224 ImageNet images",
            f"He et al. 2016 (arXiv:1512.03385); torchvision.models.resnet{depth}",
            CNN_BATCH_NOTE,
            {"params": params, "gmacs": gmacs,
             "source": TORCHVISION.format(f"resnet{depth}") + f" (ResNet{depth}_Weights.IMAGENET1K_V1: num_params "
                       f"{params}, 'GFLOPS' {gmacs}, which counts multiply-accumulates)"},
            "SGD with momentum 0.9 (" + GOYAL + ")",
        ),
    ) for depth, params, gmacs in ((101, 44_549_160, 7.8), (152, 60_192_808, 11.51))},
    "alexnet": ModelSpec(
        build_alexnet, imagenet_batch(224), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x224x224"},
        zoo=_cnn_zoo(
            "AlexNet (torchvision layout: the one-GPU 64-192-384-256-256 variant), 224x224 images",
            "Krizhevsky et al. 2012 (NeurIPS); Krizhevsky 2014 (arXiv:1404.5997); torchvision.models.alexnet",
            "128 images per batch, as Krizhevsky et al. 2012 section 5 trained it (over two GPUs)",
            {"params": 61_100_840, "gmacs": 0.71,
             "source": TORCHVISION.format("alexnet") + " (AlexNet_Weights.IMAGENET1K_V1: num_params 61100840, "
                       "'GFLOPS' 0.71 = multiply-accumulates)"},
            "SGD with momentum 0.9 (Krizhevsky et al. 2012 section 5)",
            batch=128,
        ),
    ),
    "googlenet": ModelSpec(
        build_googlenet, imagenet_batch(224), nn.CrossEntropyLoss, cpu_sized=False, info={"input": "3x224x224"},
        zoo=_cnn_zoo(
            "GoogLeNet / Inception-v1 (torchvision layout: batch norm, no auxiliary classifiers), 224x224 images",
            "Szegedy et al. 2015 (arXiv:1409.4842); torchvision.models.googlenet",
            CNN_BATCH_NOTE + " (Szegedy et al. 2015 trained asynchronously on DistBelief and give no batch size)",
            {"params": 6_624_904, "gmacs": 1.5,
             "source": TORCHVISION.format("googlenet") + " (GoogLeNet_Weights.IMAGENET1K_V1: num_params 6624904, "
                       "'GFLOPS' 1.5 = multiply-accumulates, auxiliary classifiers not counted); Szegedy et al. 2015 "
                       "section 5: 12 times fewer parameters than AlexNet (about 6.8 M in the paper's layout)"},
            "asynchronous SGD with momentum 0.9 (Szegedy et al. 2015 section 6)",
        ),
    ),
}
