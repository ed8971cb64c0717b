#!/usr/bin/python3
"""The PyTorch DDP peer (gloo, CPU): --world ranks on this machine, for bench/compare_ddp.py and
bench/straggler_bench.py. Rank 0 prints one JSON line: samples/s over all ranks of the --steps timed
steps (between barriers, after --warmup untimed ones), the last loss and the timed window's wall clock.
Models, data and step: bench/herdbench/ddp_peer.py.

Usage: ddp_peer.py --model mnist_cnn|mlp|mlp:4096x4096|torchscript:PATH|char_transformer --world 2
                   [--steps 100] [--warmup 10] [--batch 64] [--threads 1] [--port P]
                   [--text FILE --lr 0.001 --schedule constant|cosine --epochs N --seed 1
                    --eval-samples 2000]   (char_transformer)
"""
from herdbench.ddp_peer import main_local

if __name__ == "__main__":
    main_local()
