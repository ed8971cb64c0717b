#!/usr/bin/python3
"""PyTorch DDP (gloo, CPU) for the models the shared peer lacks: a sized mlp
and a TorchScript module, for bench/compare_ddp.py.

Data, step, optimizer, timing and output are those of the shared peer
(../shared/bench/ddp_baseline.py, whose loader it imports): Fashion-MNIST,
SGD lr 0.05 momentum 0.9, `--warmup` untimed steps, then `--steps` timed
between barriers; rank 0 prints one JSON line with samples/s over all ranks.

Models: mlp:W1xW2... (784-W1-W2-...-10 with ReLU, as herd's `mlp` with
`hidden: [W1, W2, ...]`), or torchscript:PATH (a TorchScript file whose
forward(x) returns logits, the same file herd loads).

Usage: ddp_peer.py --model mlp:4096x4096 --world 2 [--steps 100] [--warmup 10] [--batch 64]
                   [--threads 1] [--port P]
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from ddp_baseline import D, load_idx  # noqa: E402


def build_model(name):
    kind, _, arg = name.partition(":")
    if kind == "mlp":
        widths = [784] + [int(w) for w in arg.split("x")]
        layers = [nn.Flatten()]
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(widths[-1], 10))
    if kind == "torchscript":
        return torch.jit.load(arg)
    raise ValueError(f"--model {name!r}: expected mlp:W1xW2... or torchscript:PATH")


def load_train():
    """Fashion-MNIST's training images (N x 1 x 28 x 28 in [0, 1]) and labels."""
    X = torch.from_numpy(load_idx(f"{D}/train-images-idx3-ubyte.gz").copy()).float().div_(255).unsqueeze(1)
    Y = torch.from_numpy(load_idx(f"{D}/train-labels-idx1-ubyte.gz").astype(np.int64))
    return X, Y


def timed_steps(ddp, X, Y, rank, world, batch, warmup, steps):
    """The shared peer's step (SGD lr 0.05 momentum 0.9 on this rank's slice of
    one seeded permutation): `warmup` untimed steps, then `steps` timed between
    barriers. Returns (seconds, last loss, [wall clock at their start, at their end])."""
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(1))[rank::world]

    def step(i):
        idx = perm[(i * batch) % (len(perm) - batch):][:batch]
        loss = F.cross_entropy(ddp(X[idx]), Y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    for i in range(warmup):
        step(i)
    dist.barrier()
    start, began = time.perf_counter(), time.time()
    for i in range(steps):
        loss = step(warmup + i)
    dist.barrier()
    return time.perf_counter() - start, float(loss), [began, time.time()]


def run(rank, a):
    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    torch.manual_seed(0)
    X, Y = load_train()
    ddp = nn.parallel.DistributedDataParallel(build_model(a.model))
    seconds, loss, window = timed_steps(ddp, X, Y, rank, a.world, a.batch, a.warmup, a.steps)
    if rank == 0:
        print(json.dumps({"peer": "torch-ddp-gloo", "torch": torch.__version__, "model": a.model, "world": a.world,
                          "batch": a.batch, "steps": a.steps, "seconds": round(seconds, 3),
                          "samples_per_s": round(a.steps * a.batch * a.world / seconds, 1), "loss": loss,
                          "timed_unix": window}))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--port", type=int, default=29511)
    a = p.parse_args()
    build_model(a.model)  # a bad --model fails here, before any process starts
    mp.spawn(run, args=(a,), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
