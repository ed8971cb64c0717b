"""herd's Python benchmarks, as one package.

The commands are the scripts in bench/ (`python3 bench/NAME.py --help`); each
is a thin entry point into this package, which Python finds next to them.

  cluster       a local herd cluster: coordinator, worker daemons, the CLI,
                building the binaries, and the environment herd runs in
  trainer_logs  what the benchmarks read from herd's trainer logs
  herd_vs_ddp   one job on herd and the same job on the DDP peer, timed alike
  ddp_peer      the one PyTorch DDP peer: its models, data, step and timing,
                as local ranks (bench/ddp_peer.py) or one rank per host
                (bench/ddp_host_rank.py)
  gpu_peer      the DDP peer as a long-lived process for bench/gpu_bench.py
  models        herd's built-in models in PyTorch (mnist_cnn, mlp,
                resnet_small, char_transformer) and TorchScript files
  char_transformer, resnet_small  two of them, with char_transformer's text data
  data          IDX files (Fashion-MNIST's format), as herd's idx dataset reads them
  synthetic_images  image sets of Fashion-MNIST's shape (bench/synthetic_images.py)
  sampler       herd's sampler, so the peer trains on herd's samples
  duty_cycle    slowing a process from outside (bench/straggler_bench.py)
  recovery_job  the job that the recovery and drain benchmarks disturb

cluster, trainer_logs, herd_vs_ddp, recovery_job and duty_cycle need only the
standard library (the benchmarks run under any python3); the peer's modules
need PyTorch and run under the peer's Python (Debian's python3-torch).
"""
