#!/usr/bin/python3
"""One PyTorch DDP rank (gloo, CPU) per host, for bench/wan_bench.py.

mnist_cnn: the shared DDP peer's CNN, data and step (../shared/bench/ddp_baseline.py,
SGD lr 0.05 momentum 0.9). char_transformer: herd's model, text data and
batching in PyTorch (bench/char_transformer_torch.py; the samples each step
takes come from herd's sampler, bench/herd_sampler.py, with the job's seed,
and each rank's loss is weighted by its share of the step, as herd's
trainer does), AdamW (herd's defaults: betas 0.9 / 0.999, eps 1e-8, weight
decay 0.01) at --lr under --schedule, and herd's evaluation after training.
One rank runs in the current process, so each rank can live in its own
network namespace: MASTER_ADDR is rank 0's host address,
GLOO_SOCKET_IFNAME the host's eth0. --steps counts every step; the first
--warmup are not timed. Rank 0 prints one JSON line: samples/s per rank over
the timed steps (between barriers), the parameter count and, for
char_transformer, the eval.

Usage: ddp_host_rank.py --rank R --world 3 --master 198.18.x.11 --port P
                        [--model mnist_cnn|char_transformer] [--steps 20] [--warmup 3] [--batch 64]
                        [--text FILE --lr 0.001 --schedule constant|cosine --epochs N --seed 1
                         --eval-samples 2000]   (char_transformer)
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import char_transformer_torch as ct  # noqa: E402
from herd_sampler import epoch_permutation, step_slice  # noqa: E402


def lr_at(lr, schedule, step, total):
    """worker/train/optim/lr_schedule.cc without warmup: constant, or cosine to 0 at the last step."""
    if schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / max(1, total))))
    return lr


def train_char_transformer(a):
    """Returns (timed seconds, this rank's timed samples, all ranks' samples, parameters, eval)."""
    torch.manual_seed(0)
    model = ct.CharTransformer()
    parameters = sum(p.numel() for p in model.parameters())
    assert parameters == ct.HERD_PARAMETERS, f"{parameters} parameters, herd's char_transformer has {ct.HERD_PARAMETERS}"
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    train, held_out = ct.load_split(a.text, train=True), ct.load_split(a.text, train=False)
    n = ct.window_count(train)
    total = a.epochs * math.ceil(n / (a.world * a.batch)) if a.epochs else a.steps
    epoch, position, perm = 0, 0, epoch_permutation(n, a.seed, 0)
    start, timed, trained = None, 0, 0
    for step in range(total):
        if step == min(a.warmup, total - 1):
            dist.barrier()
            start = time.perf_counter()
        indices, consumed = step_slice(perm, position, a.world, a.rank, a.batch)
        timed += len(indices) if start is not None else 0
        x, y = ct.windows(train, indices)
        loss = ct.mean_cross_entropy(ddp(x), y)
        # DDP averages the ranks' gradients; herd sums each rank's loss
        # weighted by its share of the step's samples (a short last step).
        (loss * (len(indices) * a.world / consumed)).backward()
        for group in opt.param_groups:
            group["lr"] = lr_at(a.lr, a.schedule, step, total)
        opt.step()
        opt.zero_grad(set_to_none=True)
        position += consumed
        trained += consumed
        if position >= n:
            epoch, position = epoch + 1, 0
            perm = epoch_permutation(n, a.seed, epoch)
    dist.barrier()
    seconds = time.perf_counter() - start
    result = ct.evaluate(model, held_out, a.eval_samples) if a.rank == 0 else {}
    return seconds, timed, trained, parameters, result


def train_mnist_cnn(a):
    from ddp_baseline import CNN
    from ddp_peer import load_train, timed_steps
    torch.manual_seed(0)
    X, Y = load_train()
    model = CNN()
    ddp = nn.parallel.DistributedDataParallel(model)
    warmup = min(a.warmup, a.steps - 1)
    seconds, _, _ = timed_steps(ddp, X, Y, a.rank, a.world, a.batch, warmup, a.steps - warmup)
    return seconds, (a.steps - warmup) * a.batch, a.steps * a.batch * a.world, sum(p.numel() for p in model.parameters()), {}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--model", default="mnist_cnn", choices=["mnist_cnn", "char_transformer"])
    p.add_argument("--steps", type=int, default=20, help="steps in all, warmup included")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--text", help="char_transformer: the text file (herd's dataset.path)")
    p.add_argument("--lr", type=float, default=0.001, help="char_transformer: AdamW's learning rate")
    p.add_argument("--schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--epochs", type=int, default=0, help="char_transformer: epochs instead of --steps")
    p.add_argument("--seed", type=int, default=1, help="char_transformer: the job's seed (the sampler's)")
    p.add_argument("--eval-samples", type=int, default=2000)
    a = p.parse_args()
    if a.steps < 2 and not a.epochs:
        p.error("--steps: at least 2 (a warmup step and a timed one)")
    if a.model == "char_transformer" and not a.text:
        p.error("--text: required with --model char_transformer")
    if a.lr <= 0:
        p.error(f"--lr: must be > 0, got {a.lr}")
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR=a.master, MASTER_PORT=str(a.port), GLOO_SOCKET_IFNAME="eth0")
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    train = train_char_transformer if a.model == "char_transformer" else train_mnist_cnn
    seconds, samples, trained, parameters, result = train(a)
    if a.rank == 0:
        print(json.dumps({"peer": "torch-ddp-gloo", "torch": torch.__version__, "model": a.model, "world": a.world,
                          "batch": a.batch, "timed_samples": samples, "seconds": round(seconds, 3),
                          "samples_per_s_per_rank": round(samples / seconds, 1), "samples": trained,
                          "parameters": parameters, "eval": result}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
