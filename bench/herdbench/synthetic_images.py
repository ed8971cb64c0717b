#!/usr/bin/env python3
"""Synthetic image sets in Fashion-MNIST's format (IDX, 1x28x28 uint8 images,
10 classes, each class a fixed random template plus noise): train and test
splits under the real set's file names, which herd's idx dataset and the
PyTorch peers read alike. For speed benches: same shapes and bytes per
sample as the real set, so a step costs the same; accuracy figures from it
mean nothing. Used by gpu_peer.py (its write_images request) and,
as a command, by scripts/straggler_on_device.sh where a machine has no
Fashion-MNIST (the DDP peer reads only the gzipped files there).

Usage: bench/synthetic_images.py DIR [--train 60000] [--test 10000] [--seed 1] [--gzip]
"""
import argparse
import gzip
import os

import numpy as np


def write_idx(path, array, compress=False):
    """One uint8 IDX file (`path`, plus .gz when compressed)."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    data = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    if compress:
        with gzip.open(path + ".gz", "wb", compresslevel=1) as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def write_image_set(path, train, test, seed, compress=False):
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(10, 28, 28))
    os.makedirs(path, exist_ok=True)
    for split, count in (("train", train), ("t10k", test)):
        labels = np.arange(count) % 10  # every class present: herd counts classes from the largest label
        rng.shuffle(labels)
        noise = rng.integers(-64, 65, size=(count, 28, 28))
        images = np.clip(templates[labels] + noise, 0, 255)
        write_idx(os.path.join(path, f"{split}-images-idx3-ubyte"), images, compress)
        write_idx(os.path.join(path, f"{split}-labels-idx1-ubyte"), labels, compress)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--train", type=int, default=60000)
    p.add_argument("--test", type=int, default=10000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gzip", action="store_true", help="write .gz files, as the real set's")
    args = p.parse_args()
    write_image_set(args.dir, args.train, args.test, args.seed, args.gzip)
    print(f"wrote a synthetic image set of {args.train} + {args.test} samples to {args.dir}")


if __name__ == "__main__":
    main()
