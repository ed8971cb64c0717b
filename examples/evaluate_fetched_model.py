#!/usr/bin/python3
"""Load a model fetched with `herd fetch` into its PyTorch twin and evaluate it.

    herd fetch JOB --out .                    # writes ./JOB.safetensors
    examples/evaluate_fetched_model.py JOB.safetensors --max-samples 2000

The file is safetensors (8-byte little-endian header length, a JSON header,
raw little-endian tensors), read here with a few lines of Python so the
`safetensors` package is not needed. The tensors are keyed by the model's
state_dict names, so `load_state_dict(strict=True)` checks that every
parameter is there. herd's mnist_cnn is defined below in PyTorch with the
same layers under the same names, so the script needs nothing outside this
repository. Evaluation is herd's: the first --max-samples of
Fashion-MNIST's t10k set, pixels scaled to [0, 1], mean cross-entropy and
the fraction predicted right. Prints one JSON line {"accuracy", "loss",
"samples", "model"}.
"""
import argparse
import gzip
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


def read_safetensors(path):
    """Returns ({name: tensor}, metadata) from a safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (header_size,) = struct.unpack("<Q", data[:8])
    if header_size > len(data) - 8:
        raise ValueError(f"header length {header_size} runs past the file's end ({len(data)} bytes)")
    header = json.loads(data[8:8 + header_size])
    metadata = header.pop("__metadata__", {})
    body = memoryview(data)[8 + header_size:]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        flat = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype) if end > begin else torch.empty(0, dtype=dtype)
        tensors[name] = flat.reshape(entry["shape"])
    return tensors, metadata


class MnistCnn(torch.nn.Module):
    """herd's mnist_cnn in PyTorch: the same layers under the same names."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 32, 3, 1)
        self.c2 = torch.nn.Conv2d(32, 64, 3, 1)
        self.f1 = torch.nn.Linear(9216, 128)
        self.f2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


def load_idx(path):
    """An IDX file (gzip), as a uint8 array of its dimensions."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = struct.unpack(">" + "I" * data[3], data[4:4 + 4 * data[3]])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a .safetensors file from herd fetch")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="folder of the IDX files")
    parser.add_argument("--max-samples", type=int, default=0, help="the job's eval.max_samples (0: all)")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()

    try:
        tensors, metadata = read_safetensors(args.model)
    except (OSError, ValueError, KeyError, struct.error) as e:
        sys.exit(f"{args.model}: not a readable safetensors file: {e}")
    name = metadata.get("herd_model", "")
    if name != "mnist_cnn":
        sys.exit(f"{args.model}: model '{name}' has no PyTorch twin here (mnist_cnn has)")
    model = MnistCnn()
    model.load_state_dict(tensors, strict=True)
    model.eval()

    images = load_idx(os.path.join(args.data, "t10k-images-idx3-ubyte.gz"))
    labels = load_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz"))
    count = len(labels) if args.max_samples <= 0 else min(args.max_samples, len(labels))
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, count, args.batch):
            stop = min(start + args.batch, count)
            x = torch.from_numpy(np.array(images[start:stop], dtype=np.float32)).unsqueeze(1) / 255.0
            y = torch.from_numpy(np.array(labels[start:stop], dtype=np.int64))
            logits = model(x)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
    print(json.dumps({"accuracy": correct / count, "loss": loss_sum / count, "samples": count, "model": name}))


if __name__ == "__main__":
    main()
