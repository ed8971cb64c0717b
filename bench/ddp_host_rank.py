#!/usr/bin/python3
"""One PyTorch DDP rank (gloo, CPU) per host, for bench/wan_bench.py.

The model, data loading and step are the shared DDP peer's
(../shared/bench/ddp_baseline.py); this only runs one rank of it in the
current process, so each rank can live in its own network namespace:
MASTER_ADDR is rank 0's host address, GLOO_SOCKET_IFNAME the host's eth0.
Rank 0 prints one JSON line: samples/s per rank over the timed steps.

Usage: ddp_host_rank.py --rank R --world 3 --master 198.18.x.11 --port P
                        [--steps 20] [--warmup 3] [--batch 64]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from ddp_baseline import CNN  # noqa: E402
from ddp_peer import load_train, timed_steps  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    a = p.parse_args()
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR=a.master, MASTER_PORT=str(a.port), GLOO_SOCKET_IFNAME="eth0")
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    torch.manual_seed(0)
    X, Y = load_train()
    ddp = nn.parallel.DistributedDataParallel(CNN())
    seconds, loss = timed_steps(ddp, X, Y, a.rank, a.world, a.batch, a.warmup, a.steps)
    if a.rank == 0:
        print(json.dumps({"peer": "torch-ddp-gloo", "torch": torch.__version__, "world": a.world, "batch": a.batch,
                          "steps": a.steps, "seconds": round(seconds, 3),
                          "samples_per_s_per_rank": round(a.steps * a.batch / seconds, 1), "loss": loss}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
