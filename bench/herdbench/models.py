"""herd's built-in models in PyTorch, for the DDP peer, by herd's names.

A model is named on a command line as
  mnist_cnn          conv 1->32 k3, conv 32->64 k3, max-pool 2, 9216->128->10
                     (worker/models/mnist_cnn.cc; PyTorch's mnist example Net)
  mlp                784 -> 1024 -> 1024 -> 10 with ReLU (herd's default mlp)
  mlp:W1xW2...       784 -> W1 -> W2 -> ... -> 10 (herd's mlp with `hidden: [W1, W2, ...]`)
  torchscript:PATH   a TorchScript file whose forward(x) returns logits, the file herd loads
  char_transformer   worker/models/char_transformer.cc with its defaults (char_transformer.py)
  resnet_small       worker/models/resnet_small.cc with its defaults (resnet_small.py)
and in a spec (a dict, bench/gpu_bench.py's requests) as {"name": ..., and the model's options}.
Layers are created in herd's registration order, so a seeded build gives the same values every time.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import char_transformer as ct
from . import resnet_small as rs

MLP_HIDDEN = [1024, 1024]  # herd's mlp without `hidden`
NAMES = ("mnist_cnn", "mlp", "mlp:W1xW2...", "torchscript:PATH", "char_transformer", "resnet_small")


class MnistCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 32, 3, 1)
        self.c2 = nn.Conv2d(32, 64, 3, 1)
        self.f1 = nn.Linear(9216, 128)
        self.f2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


class Mlp(nn.Module):
    """Flatten, then Linear + ReLU per hidden width, then Linear; parameters named as herd's (net.1.weight, ...)."""

    def __init__(self, features, hidden, classes):
        super().__init__()
        widths = [features] + list(hidden)
        layers = [nn.Flatten()]
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Linear(widths[-1], classes))

    def forward(self, x):
        return self.net(x)


def parse(text):
    """A command line's model name -> its spec; a ValueError names what is wrong."""
    kind, sep, arg = text.partition(":")
    if kind == "mlp" and sep:
        try:
            hidden = [int(w) for w in arg.split("x")]
        except ValueError:
            hidden = []
        if not hidden or min(hidden) <= 0:
            raise ValueError(f"--model {text!r}: expected mlp:W1xW2... with positive widths, e.g. mlp:4096x4096")
        return {"name": "mlp", "hidden": hidden}
    if kind == "torchscript" and arg:
        return {"name": "torchscript", "path": arg}
    if not sep and kind in ("mnist_cnn", "mlp", "char_transformer", "resnet_small"):
        return {"name": kind}
    raise ValueError(f"--model {text!r}: expected one of {', '.join(NAMES)}")


def build(spec, features=784, classes=10):
    """The model of `spec` for inputs of `features` values (mlp) and `classes` classes."""
    name = spec["name"]
    if name == "mnist_cnn":
        return MnistCnn()
    if name == "mlp":
        return Mlp(features or 784, spec.get("hidden", MLP_HIDDEN), classes)
    if name == "torchscript":
        return torch.jit.load(spec["path"])
    if name == "resnet_small":
        return rs.ResnetSmall(in_channels=1, widths=spec.get("widths", (16, 32, 64)), classes=classes)
    if name == "char_transformer":
        return ct.CharTransformer(width=spec.get("width", ct.WIDTH), heads=spec.get("heads", ct.HEADS),
                                  layers=spec.get("layers", ct.LAYERS))
    raise ValueError(f"model {name!r}: expected mnist_cnn, mlp, torchscript, resnet_small or char_transformer")
