"""The DDP peer's data: IDX files (Fashion-MNIST's format), as herd's idx dataset reads them."""
import gzip
import os
import struct

import numpy as np
import torch


def read_idx(path):
    """An IDX file (gzipped if its name ends in .gz) as a uint8 array of its shape."""
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_images(directory, split="train", suffix=""):
    """A split's images (N x 1 x H x W float in [0, 1]) and int64 labels, as herd's idx dataset holds them.
    `suffix` is ".gz" for the gzipped files (the real Fashion-MNIST's)."""
    images = read_idx(os.path.join(directory, f"{split}-images-idx3-ubyte{suffix}"))
    labels = read_idx(os.path.join(directory, f"{split}-labels-idx1-ubyte{suffix}"))
    x = torch.from_numpy(images.copy()).float().div_(255).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y
