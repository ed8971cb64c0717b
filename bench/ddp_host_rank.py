#!/usr/bin/python3
"""One rank of the PyTorch DDP peer (gloo, CPU) in this process, for bench/wan_bench.py: each rank can
live in its own network namespace (MASTER_ADDR is rank 0's host address, GLOO_SOCKET_IFNAME the host's
eth0). --steps counts every step; the first --warmup are not timed. Rank 0 prints one JSON line:
samples/s per rank over the timed steps (between barriers), the parameter count and, for
char_transformer, herd's evaluation. Models, data and step: bench/herdbench/ddp_peer.py.

Usage: ddp_host_rank.py --rank R --world 3 --master 198.18.x.11 --port P
                        [--model mnist_cnn|char_transformer] [--steps 20] [--warmup 3] [--batch 64]
                        [--text FILE --lr 0.001 --schedule constant|cosine --epochs N --seed 1
                         --eval-samples 2000]   (char_transformer)
"""
from herdbench.ddp_peer import main_host_rank

if __name__ == "__main__":
    main_host_rank()
