#!/usr/bin/python3
"""Load a model fetched with `herd fetch` into its PyTorch twin and evaluate it.

    herd fetch JOB --out .                    # writes ./JOB.safetensors
    examples/evaluate_fetched_model.py JOB.safetensors --max-samples 2000

The file is safetensors (8-byte little-endian header length, a JSON header,
raw little-endian tensors), read here with a few lines of Python so the
`safetensors` package is not needed. The tensors are keyed by the model's
state_dict names, so `load_state_dict(strict=True)` checks that every
parameter is there. herd's mnist_cnn is the PyTorch CNN of the DDP baseline
(../shared/bench/ddp_baseline.py, imported, not copied; HERD_DDP_BASELINE
names another copy). Evaluation is herd's: the first --max-samples of
Fashion-MNIST's t10k set, pixels scaled to [0, 1], mean cross-entropy and
the fraction predicted right. Prints one JSON line {"accuracy", "loss",
"samples", "model"}.
"""
import argparse
import importlib.util
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


def ddp_baseline():
    """The shared DDP baseline module: herd's models' PyTorch twins and the IDX reader."""
    here = os.path.dirname(os.path.realpath(__file__))
    path = os.environ.get("HERD_DDP_BASELINE") or os.path.join(here, "..", "..", "shared", "bench", "ddp_baseline.py")
    spec = importlib.util.spec_from_file_location("ddp_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    baseline = ddp_baseline()
    if name != "mnist_cnn":
        sys.exit(f"{args.model}: model '{name}' has no PyTorch twin here (mnist_cnn has)")
    model = baseline.CNN()
    model.load_state_dict(tensors, strict=True)
    model.eval()

    images = baseline.load_idx(os.path.join(args.data, "t10k-images-idx3-ubyte.gz"))
    labels = baseline.load_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz"))
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
