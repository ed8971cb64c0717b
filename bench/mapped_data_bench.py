#!/usr/bin/env python3
"""Memory-mapped data against in-memory data: the same model, the same samples, steps/s side by side.

Two pairs, each alternated --reps times on one local worker (a real coordinator, worker daemon and trainer):
  text vs tokens  char_transformer on one corpus: `dataset.kind: text` reads the file into memory, `tokens`
                  maps the same bytes written as uint16 ids (vocab_size 256). The windows are the same, so
                  both runs train the same steps and end with the same loss.
  idx vs npy      mlp on Fashion-MNIST: `idx` decodes the images into an in-memory float tensor, `npy` maps
                  them written as uint8 .npy files (scaled to [0, 1] per batch, as idx scales them once), so
                  again the same samples and the same loss.
The mapped files are written just before, so they are in the page cache, the case the target is about
("as fast as in-memory when the file is in the page cache"); a cold file is bounded by the disk.

steps/s is measured as compare_ddp.py measures it: rank 0's commit-point log lines at the first and last
timed step. Prints one line per run and a JSON summary with each pair's median ratio (mapped / in-memory).

Usage: bench/mapped_data_bench.py [--steps 200] [--warmup 20] [--batch 64] [--reps 3] [--bin-dir bazel-bin]
                                  [--corpus FILE]
"""
import argparse
import gzip
import json
import os
import shutil
import statistics
import struct
import tempfile

from herdbench.cluster import FASHION_MNIST as FMNIST
from herdbench.cluster import ROOT, LocalCluster, build, share_trainers_openblas_kernels
from herdbench.trainer_logs import timed_seconds


def write_npy(path, descr, shape, data):
    """A version 1 .npy file, as np.save writes it (header padded to 64 bytes)."""
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': ({dims}), }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)


def read_idx(path):
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return shape, raw[4 + 4 * dims:]


def prepare(directory, corpus):
    """Writes the mapped twins of the in-memory data; returns the dataset specs of both pairs."""
    with open(corpus, "rb") as f:
        text = f.read()
    corpus = os.path.join(directory, "corpus.txt")  # a copy: the text side must read what the tokens hold
    with open(corpus, "wb") as f:
        f.write(text)
    tokens = os.path.join(directory, "corpus.u16")
    with open(tokens, "wb") as f:
        f.write(struct.pack(f"<{len(text)}H", *text))
    files = {}
    for split in ("train", "t10k"):
        (n, h, w), pixels = read_idx(os.path.join(FMNIST, f"{split}-images-idx3-ubyte.gz"))
        (m,), labels = read_idx(os.path.join(FMNIST, f"{split}-labels-idx1-ubyte.gz"))
        assert n == m
        files[split] = (os.path.join(directory, f"{split}-x.npy"), os.path.join(directory, f"{split}-y.npy"))
        write_npy(files[split][0], "|u1", (n, 1, h, w), pixels)
        write_npy(files[split][1], "<i8", (n,), struct.pack(f"<{n}q", *labels))
    return {
        "text": ("model: char_transformer", f"{{kind: text, path: {corpus}}}"),
        "tokens": ("model: char_transformer", f"{{kind: tokens, path: {tokens}, vocab_size: 256}}"),
        "idx": ("model: mlp", f"{{kind: idx, path: {FMNIST}}}"),
        "npy": ("model: mlp", f"{{kind: npy, inputs: {files['train'][0]}, targets: {files['train'][1]}, "
                              f"validation_inputs: {files['t10k'][0]}, validation_targets: {files['t10k'][1]}}}"),
    }


def run(cluster, kind, specs, args):
    model, dataset = specs[kind]
    spec = (f"name: bench-{kind}\n{model}\ndataset: {dataset}\nbatch_size: {args.batch}\n"
            f"max_steps: {args.warmup + args.steps}\noptimizer: {{name: sgd, lr: 0.05}}\nthreads: 1\n"
            f"log_interval_steps: {args.warmup}\neval: {{max_samples: 256}}\nmin_workers: 1\nseed: 1\n")
    job, info = cluster.run_job(spec, timeout=1800)
    return args.steps / timed_seconds(cluster, job, info, args.warmup, args.steps), info.get("loss", 0.0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--bin-dir", help="use binaries already built there instead of building (bazel-bin)")
    p.add_argument("--corpus", default=os.path.join(ROOT, "docs", "design.md"),
                   help="the text both sides of the text/tokens pair train on")
    args = p.parse_args()
    if args.steps % args.warmup:
        p.error("--steps must be a multiple of --warmup (herd logs every --warmup steps)")
    bin_dir = args.bin_dir or build()
    share_trainers_openblas_kernels(bin_dir)
    data_dir = tempfile.mkdtemp(prefix="herd-mapped-bench-")
    specs = prepare(data_dir, args.corpus)
    rates = {kind: [] for kind in specs}
    losses = {}
    print(f"# {os.cpu_count()} cores, batch {args.batch}, {args.warmup} warmup + {args.steps} timed steps, "
          f"{args.reps} reps, one worker")
    cluster = LocalCluster(bin_dir, 1)
    try:
        for rep in range(args.reps):
            for kind in ("text", "tokens", "idx", "npy"):
                rate, loss = run(cluster, kind, specs, args)
                rates[kind].append(rate)
                losses[kind] = loss
                print(f"rep {rep} {kind:6s} {rate:8.1f} steps/s  loss {loss:.6f}", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(data_dir, ignore_errors=True)  # the mapped twins (the cluster's logs stay)
    median = {kind: statistics.median(r) for kind, r in rates.items()}
    summary = {
        "steps_per_s": median,
        "tokens_over_text": median["tokens"] / median["text"],
        "npy_over_idx": median["npy"] / median["idx"],
        "same_loss": {"text_tokens": losses["text"] == losses["tokens"], "idx_npy": losses["idx"] == losses["npy"]},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
