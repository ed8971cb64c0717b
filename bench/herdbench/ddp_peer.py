"""The PyTorch DDP peer (gloo on the CPU) that herd's benchmarks compare against.

One training loop for every model (models.py):
- image models (mnist_cnn, mlp, mlp:W1xW2..., torchscript:PATH) on Fashion-MNIST: SGD lr 0.05 momentum 0.9,
  each rank's slice of one seeded permutation, mean cross entropy;
- char_transformer on a text file (herd's text dataset): herd's sampler with the job's --seed (each rank's
  loss weighted by its share of the step, as herd's trainer does), AdamW with herd's defaults (betas
  0.9 / 0.999, eps 1e-8, weight decay 0.01) at --lr under --schedule, herd's evaluation after training.
`warmup` untimed steps, then the timed steps between barriers.

Two ways to run it:
- bench/ddp_peer.py: --world ranks on this machine (torch.multiprocessing), --steps timed steps after
  --warmup; rank 0 prints one JSON line with samples/s over all ranks (bench/compare_ddp.py,
  bench/straggler_bench.py);
- bench/ddp_host_rank.py: one rank in this process, so each rank can live in its own network namespace
  (MASTER_ADDR is rank 0's host, GLOO_SOCKET_IFNAME the host's eth0); --steps counts every step, the first
  --warmup untimed; rank 0 prints samples/s per rank (bench/wan_bench.py).
gpu_peer.py runs the same loop on one device for bench/gpu_bench.py.
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from . import char_transformer as ct
from . import models
from .cluster import FASHION_MNIST
from .data import load_images
from .sampler import epoch_permutation, step_slice


def timed_loop(step, warmup, steps, sync, loss_every=0):
    """Runs step(i) -> loss for i < `warmup` untimed, then `steps` more timed between two sync()s.
    With `loss_every`, the loss is read on the host where herd reads it (the end of the warmup and every
    `loss_every` timed steps); else once, after the timed steps. Returns seconds (timed), loss (the last
    one read), timed_unix ([wall clock at the start, at the end of the timed steps]) and warmup_seconds."""
    warm_start = time.perf_counter()
    loss, last = None, float("nan")
    for i in range(warmup):
        loss = step(i)
    if loss_every and loss is not None:
        last = float(loss)
    sync()
    warmup_seconds = time.perf_counter() - warm_start
    start, began = time.perf_counter(), time.time()
    for i in range(steps):
        loss = step(warmup + i)
        if loss_every and (i + 1) % loss_every == 0:
            last = float(loss)
    sync()
    seconds = time.perf_counter() - start
    if not loss_every and loss is not None:
        last = float(loss)
    return {"seconds": seconds, "loss": last, "timed_unix": [began, time.time()], "warmup_seconds": warmup_seconds}


def lr_at(lr, schedule, step, total):
    """worker/train/lr_schedule.cc without warmup: constant, or cosine to 0 at the last step."""
    if schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / max(1, total))))
    return lr


def train_images(a, rank, world, warmup, steps):
    """An image model on Fashion-MNIST. Returns the run's figures (timed_loop's, and samples)."""
    torch.manual_seed(0)
    X, Y = load_images(FASHION_MNIST, suffix=".gz")
    model = models.build(models.parse(a.model))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(1))[rank::world]
    batch = a.batch

    def step(i):
        idx = perm[(i * batch) % (len(perm) - batch):][:batch]
        loss = F.cross_entropy(ddp(X[idx]), Y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    run = timed_loop(step, warmup, steps, dist.barrier)
    run.update(timed_samples=steps * batch, samples=(warmup + steps) * batch * world,
               parameters=sum(p.numel() for p in model.parameters()), eval={})
    return run


class TextSteps:
    """char_transformer's steps on herd's sampler: step(i) trains step i; counts the samples."""

    def __init__(self, a, rank, world, ddp, opt, train, total, warmup):
        self.a, self.rank, self.world, self.ddp, self.opt, self.train = a, rank, world, ddp, opt, train
        self.total, self.warmup = total, warmup
        self.n = ct.window_count(train)
        self.epoch, self.position, self.perm = 0, 0, epoch_permutation(self.n, a.seed, 0)
        self.timed, self.trained = 0, 0

    def __call__(self, i):
        indices, consumed = step_slice(self.perm, self.position, self.world, self.rank, self.a.batch)
        self.timed += len(indices) if i >= self.warmup else 0
        x, y = ct.windows(self.train, indices)
        loss = ct.mean_cross_entropy(self.ddp(x), y)
        # DDP averages the ranks' gradients; herd sums each rank's loss
        # weighted by its share of the step's samples (a short last step).
        (loss * (len(indices) * self.world / consumed)).backward()
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.a.lr, self.a.schedule, i, self.total)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.position += consumed
        self.trained += consumed
        if self.position >= self.n:
            self.epoch, self.position = self.epoch + 1, 0
            self.perm = epoch_permutation(self.n, self.a.seed, self.epoch)
        return loss


def train_text(a, rank, world, warmup, steps):
    """char_transformer on --text; with --epochs, that many epochs instead of warmup + steps."""
    torch.manual_seed(0)
    model = ct.CharTransformer()
    parameters = sum(p.numel() for p in model.parameters())
    assert parameters == ct.HERD_PARAMETERS, f"{parameters} parameters, herd's char_transformer has {ct.HERD_PARAMETERS}"
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    train, held_out = ct.load_split(a.text, train=True), ct.load_split(a.text, train=False)
    total = warmup + steps
    if a.epochs:
        total = a.epochs * math.ceil(ct.window_count(train) / (world * a.batch))
        warmup = min(a.warmup, total - 1)
    step = TextSteps(a, rank, world, ddp, opt, train, total, warmup)
    run = timed_loop(step, warmup, total - warmup, dist.barrier)
    run.update(timed_samples=step.timed, samples=step.trained, parameters=parameters,
               eval=ct.evaluate(model, held_out, a.eval_samples) if rank == 0 else {})
    return run


def train(a, rank, world, warmup, steps):
    """This rank's run of --model: `warmup` untimed steps, then `steps` timed ones."""
    return (train_text if a.model == "char_transformer" else train_images)(a, rank, world, warmup, steps)


def add_model_flags(p, default_model=None):
    p.add_argument("--model", required=default_model is None, default=default_model,
                   help=f"one of {', '.join(models.NAMES)} (herdbench/models.py)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--text", help="char_transformer: the text file (herd's dataset.path)")
    p.add_argument("--lr", type=float, default=0.001, help="char_transformer: AdamW's learning rate")
    p.add_argument("--schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--epochs", type=int, default=0, help="char_transformer: epochs instead of --steps")
    p.add_argument("--seed", type=int, default=1, help="char_transformer: the job's seed (the sampler's)")
    p.add_argument("--eval-samples", type=int, default=2000)


def check_model_flags(p, a):
    try:
        spec = models.parse(a.model)
    except ValueError as e:
        p.error(str(e))
    if spec["name"] == "resnet_small":
        p.error("--model resnet_small: bench/gpu_bench.py's model only (gpu_peer.py)")
    if spec["name"] == "char_transformer" and not a.text:
        p.error("--text: required with --model char_transformer")
    if a.lr <= 0:
        p.error(f"--lr: must be > 0, got {a.lr}")
    if a.batch <= 0:
        p.error(f"--batch: must be > 0, got {a.batch}")


def run_local_rank(rank, a):
    torch.set_num_threads(a.threads)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=rank, world_size=a.world)
    run = train(a, rank, a.world, a.warmup, a.steps)
    if rank == 0:
        print(json.dumps({"peer": "torch-ddp-gloo", "torch": torch.__version__, "model": a.model, "world": a.world,
                          "batch": a.batch, "steps": a.steps, "seconds": round(run["seconds"], 3),
                          "samples_per_s": round(run["timed_samples"] * a.world / run["seconds"], 1),
                          "loss": run["loss"], "timed_unix": run["timed_unix"], "parameters": run["parameters"],
                          "eval": run["eval"]}))
    dist.destroy_process_group()


def main_local(argv=None):
    """bench/ddp_peer.py: --world ranks on this machine."""
    p = argparse.ArgumentParser(description="The PyTorch DDP peer (gloo, CPU): --world ranks on this machine; "
                                            "rank 0 prints one JSON line with samples/s over all ranks.")
    add_model_flags(p)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=100, help="timed steps, after --warmup")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--port", type=int, default=29511)
    a = p.parse_args(argv)
    check_model_flags(p, a)
    if a.steps < 1 or a.warmup < 0:
        p.error(f"--steps: at least 1 and --warmup: at least 0, got {a.steps} and {a.warmup}")
    models.build(models.parse(a.model))  # a model that cannot be built fails here, before any process starts
    mp.spawn(run_local_rank, args=(a,), nprocs=a.world, join=True)


def main_host_rank(argv=None):
    """bench/ddp_host_rank.py: one rank in this process, rank 0 at --master."""
    p = argparse.ArgumentParser(description="One PyTorch DDP rank (gloo, CPU) per host, for bench/wan_bench.py; "
                                            "rank 0 prints one JSON line with samples/s per rank.")
    add_model_flags(p, default_model="mnist_cnn")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--master", required=True, help="rank 0's host address")
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--steps", type=int, default=20, help="steps in all, warmup included")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    a = p.parse_args(argv)
    check_model_flags(p, a)
    if a.steps < 2 and not a.epochs:
        p.error("--steps: at least 2 (a warmup step and a timed one)")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR=a.master, MASTER_PORT=str(a.port), GLOO_SOCKET_IFNAME="eth0")
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    warmup = min(a.warmup, a.steps - 1)
    run = train(a, a.rank, a.world, warmup, a.steps - warmup)
    if a.rank == 0:
        print(json.dumps({"peer": "torch-ddp-gloo", "torch": torch.__version__, "model": a.model, "world": a.world,
                          "batch": a.batch, "timed_samples": run["timed_samples"], "seconds": round(run["seconds"], 3),
                          "samples_per_s_per_rank": round(run["timed_samples"] / run["seconds"], 1),
                          "samples": run["samples"], "parameters": run["parameters"], "eval": run["eval"]}))
    dist.destroy_process_group()
