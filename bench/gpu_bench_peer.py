#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_bench.py: the DDP peer as one long-lived process that answers training
requests, one JSON line each way (protocol: bench/herdbench/gpu_peer.py).

Usage: gpu_bench_peer.py [--device cuda|cpu] [--threads 1]
"""
import sys

from herdbench.gpu_peer import main

if __name__ == "__main__":
    sys.exit(main())
