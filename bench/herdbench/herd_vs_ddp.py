"""One job on herd and the same job on the DDP peer, timed alike (bench/compare_ddp.py,
bench/straggler_bench.py): the same model, per-worker batch, optimizer (SGD lr 0.05 momentum 0.9), one
intra-op thread per worker, warmup and timed steps, on Fashion-MNIST. samples/s is wall time over the
timed steps only: herd's between rank 0's commit-point log lines at the first and last timed step, the
peer's between barriers."""
import json
import os
import subprocess

from .cluster import FASHION_MNIST, ROOT, free_port
from .trainer_logs import timed_seconds

DDP_PYTHON = "/usr/bin/python3"  # Debian's python3-torch lives there
DDP_PEER = os.path.join(ROOT, "bench", "ddp_peer.py")
# Compute-bound cases: a sized built-in model, and a user's TorchScript module
# (bench/make_residual_mlp.py) that both sides load from the same file.
SIZED_MLP = {"mlp_4096": [4096, 4096]}
MODELS = ("mnist_cnn", "mlp", *SIZED_MLP, "torchscript")


def unknown_model(model):
    """Why `model` is not one of MODELS, or None."""
    return None if model in MODELS else f"unknown {model!r} (known: {', '.join(MODELS)})"


def make_torchscript(directory):
    path = os.path.join(directory, "residual_mlp.pt")
    subprocess.run([DDP_PYTHON, os.path.join(ROOT, "bench", "make_residual_mlp.py"), path], check=True)
    return path


def herd_model(model, torchscript):
    if model in SIZED_MLP:
        return f"{{name: mlp, hidden: {SIZED_MLP[model]}}}"
    if model == "torchscript":
        return f"{{name: torchscript, path: {torchscript}}}"
    return model


def ddp_command(model, torchscript):
    """The peer's command line (after the Python) for `model`."""
    if model in SIZED_MLP:
        return [DDP_PEER, "--model", "mlp:" + "x".join(str(w) for w in SIZED_MLP[model])]
    if model == "torchscript":
        return [DDP_PEER, "--model", "torchscript:" + torchscript]
    return [DDP_PEER, "--model", model]


def run_herd(cluster, model, world, args):
    """(samples/s, final loss) of one herd job of `model` on `world` workers of `cluster`."""
    spec = (f"name: bench-{model}-w{world}\nmodel: {herd_model(model, args.torchscript)}\n"
            f"dataset: {{kind: idx, path: {FASHION_MNIST}}}\n"
            f"batch_size: {args.batch}\nmax_steps: {args.warmup + args.steps}\n"
            f"optimizer: {{name: sgd, lr: 0.05, momentum: 0.9}}\n"
            f"threads: 1\nlog_interval_steps: {args.warmup}\neval: {{max_samples: 256}}\n"
            f"min_workers: {world}\nmax_workers: {world}\nseed: 1\n"
            f"{getattr(args, 'herd_spec_extra', '')}")
    job, info = cluster.run_job(spec, timeout=1800)
    seconds = timed_seconds(cluster, job, info, args.warmup, args.steps)
    return args.steps * args.batch * world / seconds, info.get("loss", 0.0)


def run_ddp(model, world, args):
    """(samples/s, last loss) of the peer's run of `model` on `world` local ranks."""
    result = run_ddp_result(model, world, args)
    return result["samples_per_s"], result["loss"]


def run_ddp_result(model, world, args):
    """The DDP peer's result line (bench/ddp_peer.py), as a dict."""
    python = getattr(args, "python", None) or DDP_PYTHON  # straggler_bench --python
    out = subprocess.run([python, *ddp_command(model, args.torchscript), "--world", str(world),
                          "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
                          "--threads", "1", "--port", str(free_port())], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"DDP peer failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
