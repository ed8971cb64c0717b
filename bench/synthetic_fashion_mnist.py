#!/usr/bin/env python3
"""Writes a synthetic image set of Fashion-MNIST's shape where the real one is
absent (a GPU machine without Debian's dataset-fashion-mnist): gzip IDX,
60000 train + 10000 test 28x28 uint8 images, labels 0-9, each class a fixed
random template plus noise, under the real set's file names. For speed
benches only: same shapes and bytes per sample as the real set, so a step
costs the same; accuracy figures from it mean nothing.

Usage: bench/synthetic_fashion_mnist.py DIR   (numpy needed)
"""
import gzip
import os
import struct
import sys

import numpy as np


def write(path, header, array):
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + array.tobytes())


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1)
    templates = rng.integers(0, 256, size=(10, 28, 28))
    for split, count in (("train", 60000), ("t10k", 10000)):
        labels = (np.arange(count) % 10).astype(np.uint8)  # every class present
        rng.shuffle(labels)
        noise = rng.integers(-64, 65, size=(count, 28, 28))
        images = np.clip(templates[labels] + noise, 0, 255).astype(np.uint8)
        write(os.path.join(out, f"{split}-images-idx3-ubyte.gz"), struct.pack(">IIII", 0x803, count, 28, 28), images)
        write(os.path.join(out, f"{split}-labels-idx1-ubyte.gz"), struct.pack(">II", 0x801, count), labels)
    print(f"wrote a synthetic set of Fashion-MNIST's shape to {out}")


if __name__ == "__main__":
    main()
