#!/usr/bin/python3
"""Load a model fetched with `herd fetch` into its PyTorch twin and evaluate it.

    herd fetch JOB --out .                    # writes ./JOB.safetensors
    examples/evaluate_fetched_model.py JOB.safetensors --max-samples 2000
    examples/evaluate_fetched_model.py JOB.safetensors --kind tokens --data train.bin \\
        --validation-path val.bin --dtype uint16 --sequence-length 256 --max-samples 512
    examples/evaluate_fetched_model.py JOB.safetensors --kind text --data input.txt --sequence-length 64

The file is safetensors (8-byte little-endian header length, a JSON header,
raw little-endian tensors), read here with a few lines of Python so the
`safetensors` package is not needed. Its metadata names the model
(`herd_model`) and the sizes it was built with (`herd_config`, a JSON
object); herd's built-in models (mnist_cnn, mlp, resnet_small,
char_transformer) are defined below in PyTorch with the same layers under the
same names, so `load_state_dict(strict=True)` checks that every tensor is
there and the script needs nothing outside this file.

Evaluation is herd's, on the data the job named (the flags are the job
spec's dataset fields): the first --max-samples (eval.max_samples) of
- idx: the t10k files in --data, pixels scaled to [0, 1];
- text: the last 10% of the bytes of --data;
- tokens: --validation-path, or else the last 10% of the tokens of --data;
  text and tokens cut into windows i = [i*T, i*T + T + 1) of T =
  --sequence-length inputs and next-token targets.
Prints one JSON line {"accuracy", "loss", "samples", "model", "config"}: the mean
cross-entropy (per token for text and tokens) and the fraction predicted
right (of tokens for text and tokens).
"""
import argparse
import gzip
import json
import math
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


# ---- herd's built-in models in PyTorch (worker/models/*.cc) ----

class MnistCnn(torch.nn.Module):
    """mnist_cnn: conv 1->32 k3, ReLU, conv 32->64 k3, ReLU, maxpool 2, fc 128, ReLU, fc."""

    def __init__(self, classes):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 32, 3, 1)
        self.c2 = torch.nn.Conv2d(32, 64, 3, 1)
        self.f1 = torch.nn.Linear(9216, 128)
        self.f2 = torch.nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


class Mlp(torch.nn.Module):
    """mlp: flatten, then Linear + ReLU per hidden width, then Linear to the classes (net.1, net.3, ...)."""

    def __init__(self, in_features, hidden, classes):
        super().__init__()
        layers, width = [torch.nn.Flatten()], in_features
        for next_width in hidden:
            layers += [torch.nn.Linear(width, next_width), torch.nn.ReLU()]
            width = next_width
        self.net = torch.nn.Sequential(*layers, torch.nn.Linear(width, classes))

    def forward(self, x):
        return self.net(x)


def norm_layer(kind, channels):
    # herd's SyncBatchNorm2d evaluates as BatchNorm2d does: running statistics, eps 1e-5.
    return torch.nn.GroupNorm(8, channels) if kind == "group" else torch.nn.BatchNorm2d(channels)


def conv(in_channels, out_channels, kernel, stride):
    return torch.nn.Conv2d(in_channels, out_channels, kernel, stride, padding=kernel // 2, bias=False)


class BasicBlock(torch.nn.Module):
    def __init__(self, in_channels, out_channels, stride, norm):
        super().__init__()
        self.conv1 = conv(in_channels, out_channels, 3, stride)
        self.norm1 = norm_layer(norm, out_channels)
        self.conv2 = conv(out_channels, out_channels, 3, 1)
        self.norm2 = norm_layer(norm, out_channels)
        self.shortcut = stride != 1 or in_channels != out_channels
        if self.shortcut:
            self.shortcut_conv = conv(in_channels, out_channels, 1, stride)
            self.shortcut_norm = norm_layer(norm, out_channels)

    def forward(self, x):
        y = self.norm2(self.conv2(F.relu(self.norm1(self.conv1(x)))))
        skip = self.shortcut_norm(self.shortcut_conv(x)) if self.shortcut else x
        return F.relu(y + skip)


class ResnetSmall(torch.nn.Module):
    """resnet_small: 3x3 stem, two basic blocks per stage (later stages stride 2), global average pool, fc."""

    def __init__(self, in_channels, widths, classes, norm):
        super().__init__()
        self.stem_conv = conv(in_channels, widths[0], 3, 1)
        self.stem_norm = norm_layer(norm, widths[0])
        self.block_names, width = [], widths[0]
        for stage, stage_width in enumerate(widths):
            for block in range(2):
                name = f"stage{stage + 1}_block{block + 1}"
                setattr(self, name, BasicBlock(width, stage_width, 2 if stage > 0 and block == 0 else 1, norm))
                self.block_names.append(name)
                width = stage_width
        self.fc = torch.nn.Linear(width, classes)

    def forward(self, x):
        x = F.relu(self.stem_norm(self.stem_conv(x)))
        for name in self.block_names:
            x = getattr(self, name)(x)
        return self.fc(x.mean((2, 3)))


class CausalSelfAttention(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.width, self.heads = width, heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x, future):
        n, t, head_width = x.size(0), x.size(1), self.width // self.heads
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, head_width).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_width)
        mixed = scores.masked_fill(future, float("-inf")).softmax(-1) @ v  # [N, H, T, head_width]
        return self.proj(mixed.transpose(1, 2).reshape(n, t, self.width))


class TransformerBlock(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads)
        self.norm2 = torch.nn.LayerNorm(width)
        self.fc1 = torch.nn.Linear(width, 4 * width)
        self.fc2 = torch.nn.Linear(4 * width, width)

    def forward(self, x, future):
        x = x + self.attention(self.norm1(x), future)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class CharTransformer(torch.nn.Module):
    """char_transformer: decoder-only (GPT-style), token + learned position embeddings, pre-LayerNorm
    blocks of causal self-attention and a 4x GELU MLP, a final LayerNorm, a head to vocabulary logits."""

    def __init__(self, vocab_size, context, width, heads, layers):
        super().__init__()
        self.token_embedding = torch.nn.Embedding(vocab_size, width)
        self.position_embedding = torch.nn.Embedding(context, width)
        self.block_names = [f"block{i + 1}" for i in range(layers)]
        for name in self.block_names:
            setattr(self, name, TransformerBlock(width, heads))
        self.final_norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab_size)

    def forward(self, tokens):
        t = tokens.size(1)
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(t))
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        for name in self.block_names:
            x = getattr(self, name)(x, future)
        return self.head(self.final_norm(x))


def build_model(name, config, tensors):
    """The PyTorch twin of herd's model `name`: sizes from `config` (herd_config) and the tensors' shapes."""
    if name == "mnist_cnn":
        return MnistCnn(tensors["f2.weight"].shape[0])
    if name == "mlp":
        hidden = config["hidden"]
        return Mlp(tensors["net.1.weight"].shape[1], hidden, tensors[f"net.{2 * len(hidden) + 1}.weight"].shape[0])
    if name == "resnet_small":
        return ResnetSmall(tensors["stem_conv.weight"].shape[1], config["widths"], tensors["fc.weight"].shape[0],
                           config["norm"])
    if name == "char_transformer":
        return CharTransformer(config["vocab_size"], config["context"], config["width"], config["heads"],
                               config["layers"])
    raise ValueError(f"model '{name}' has no PyTorch twin here (mnist_cnn, mlp, resnet_small and char_transformer have)")


# ---- herd's evaluation sets (worker/data/*.cc) ----

def load_idx(path):
    """An IDX file (gzip), as a uint8 array of its dimensions."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = struct.unpack(">" + "I" * data[3], data[4:4 + 4 * data[3]])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def idx_batches(args, count_limit):
    images = load_idx(os.path.join(args.data, "t10k-images-idx3-ubyte.gz"))
    labels = load_idx(os.path.join(args.data, "t10k-labels-idx1-ubyte.gz"))
    count = min(count_limit, len(labels))
    for start in range(0, count, args.batch or 256):
        stop = min(start + (args.batch or 256), count)
        x = torch.from_numpy(np.array(images[start:stop], dtype=np.float32)) / 255.0
        yield x.unsqueeze(1) if x.dim() == 3 else x, torch.from_numpy(np.array(labels[start:stop], dtype=np.int64))


def sequence_ids(args):
    """The evaluation split's ids, as herd's text and tokens datasets cut it."""
    if args.kind == "text":
        ids = np.fromfile(args.data, dtype=np.uint8)
        return ids[len(ids) * 9 // 10:]
    if args.validation_path:
        return np.memmap(args.validation_path, dtype=np.dtype(args.dtype).newbyteorder("<"), mode="r")
    ids = np.memmap(args.data, dtype=np.dtype(args.dtype).newbyteorder("<"), mode="r")
    return ids[len(ids) * 9 // 10:]


def sequence_batches(args, count_limit, vocab_size):
    t = args.sequence_length
    if t <= 0:
        sys.exit(f"--sequence-length: the job's dataset.sequence_length is needed for {args.kind} data")
    ids = sequence_ids(args)
    windows = (len(ids) - 1) // t
    if windows <= 0:
        sys.exit(f"{args.kind} data: {len(ids)} evaluation ids make no window of {t + 1}")
    count = min(count_limit, windows)
    batch = args.batch or 16
    for start in range(0, count, batch):
        stop = min(start + batch, count)
        rows = np.stack([np.asarray(ids[i * t:i * t + t + 1], dtype=np.int64) for i in range(start, stop)])
        if rows.max() >= vocab_size:
            sys.exit(f"{args.kind} data: token id {rows.max()} is not below the model's vocabulary of {vocab_size}")
        rows = torch.from_numpy(rows)
        yield rows[:, :t], rows[:, 1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a .safetensors file from herd fetch")
    parser.add_argument("--kind", choices=["idx", "text", "tokens"], default="idx", help="the job's dataset.kind")
    parser.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                        help="dataset.path: the folder of the IDX files, the text file or the token file")
    parser.add_argument("--validation-path", default="", help="tokens: dataset.validation_path, if the job had one")
    parser.add_argument("--dtype", choices=["uint16", "uint32"], default="uint16", help="tokens: dataset.dtype")
    parser.add_argument("--sequence-length", type=int, default=0, help="text, tokens: dataset.sequence_length")
    parser.add_argument("--max-samples", type=int, default=0, help="the job's eval.max_samples (0: all)")
    parser.add_argument("--batch", type=int, default=0, help="samples per forward pass (default 256, 16 for text)")
    args = parser.parse_args()

    try:
        tensors, metadata = read_safetensors(args.model)
        name = metadata.get("herd_model", "")
        config = json.loads(metadata.get("herd_config", "{}"))
    except (OSError, ValueError, KeyError, struct.error) as e:
        sys.exit(f"{args.model}: not a readable safetensors file from herd: {e}")
    try:
        model = build_model(name, config, tensors)
    except (KeyError, ValueError) as e:
        sys.exit(f"{args.model}: cannot rebuild model '{name}' from herd_config {config}: {e}")
    model.load_state_dict(tensors, strict=True)
    model.eval()

    sequences = args.kind != "idx"
    if sequences != (name == "char_transformer"):
        sys.exit(f"--kind {args.kind}: model '{name}' takes {'text or tokens' if not sequences else 'idx'} data")
    limit = args.max_samples if args.max_samples > 0 else sys.maxsize
    batches = sequence_batches(args, limit, config.get("vocab_size", 0)) if sequences else idx_batches(args, limit)
    # As herd sums: each batch's mean over its positions, weighted by its samples.
    loss_sum, correct, predictions, samples = 0.0, 0, 0, 0
    with torch.no_grad():
        for x, y in batches:
            logits = model(x)
            loss_sum += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).item() * len(x)
            correct += (logits.argmax(-1) == y).sum().item()
            predictions += y.numel()
            samples += len(x)
    print(json.dumps({"accuracy": correct / predictions, "loss": loss_sum / samples, "samples": samples,
                      "model": name, "config": config}))


if __name__ == "__main__":
    main()
