"""The DDP peer as bench/gpu_bench.py's PyTorch side (bench/gpu_bench_peer.py):
one long-lived process that runs PyTorch eager and PyTorch DDP (world 1: NCCL on cuda, gloo on cpu) training
runs on request, so one process start, CUDA context and process group serve
every run of a bench.

Protocol: one JSON object per line on stdin, one JSON answer per line on
stdout (logs go to stderr). The first line out is a greeting with the torch
version and the device's name. Requests:
  {"op": "write_images", "path": DIR, "train": N, "test": M, "seed": S}
      writes a synthetic IDX image set (1x28x28 uint8 images, 10 classes,
      each class a fixed random template plus noise) that herd's idx dataset
      and this process both read;
  {"op": "train", "side": SIDE, "model": {...}, "data": {...},
   "optimizer": {...}, "precision": "fp32"|"bf16", "batch": B, "warmup": W,
   "steps": S, "log_interval": L, "seed": S}
      trains W untimed steps and S timed ones; answers samples/s, seconds,
      the last loss, the parameter count and the peak GPU memory reserved
      (torch.cuda.max_memory_reserved(); null on cpu);
  {"op": "quit"}.
SIDE is one of
  eager     the step below;
  ddp       the same under DistributedDataParallel (world 1);
  resident  eager, the whole dataset copied to the device once and each batch
            indexed there (no host gather, no copy per step);
  loader    eager fed by a torch.utils.data.DataLoader: LOADER_WORKERS worker
            processes gather whole batches by the epoch permutation,
            pin_memory on cuda, copied non_blocking;
  compile   eager's step with the model under torch.compile (default mode);
  compile_ro  the same with mode="reduce-overhead" (CUDA graphs on cuda).
The compiled sides answer compile_seconds: the wall time of the first
warmup step, where compilation happens, apart from the timed steps. Where
torch.compile is missing or fails to compile, the answer is
{"ok": false, "unavailable": true, "error": why}: reported, not a failure.

The step is herd's (worker/train/trainer.cc): gather the batch from a host
dataset by the epoch permutation (index_select), pin it and copy it to the
device non_blocking, forward and loss under bf16 autocast when asked (herd's
MeanCrossEntropy: the summed cross entropy over the rows), zero the
gradients, backward, optimizer step. The loss is read on the host at the
same points herd reads it: the end of the warmup and every `log_interval`
timed steps. Timing: wall time over the timed steps, with
torch.cuda.synchronize() at both ends. Models and the loop are the DDP
peer's (models.py, ddp_peer.timed_loop).
"""
import argparse
import json
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn

from . import char_transformer as ct
from . import models
from .data import load_images
from .ddp_peer import timed_loop
from .synthetic_images import write_image_set


SIDES = ("eager", "ddp", "resident", "loader", "compile", "compile_ro")
LOADER_WORKERS = 2


def log(*args):
    print("gpu_bench_peer:", *args, file=sys.stderr, flush=True)


def write_images(req):
    write_image_set(req["path"], req["train"], req["test"], req["seed"])
    return {"ok": True}


class Data:
    """A host dataset and its batch gather: get(indices) -> (inputs, targets) on the CPU."""

    def __init__(self, spec):
        kind = spec["kind"]
        if kind == "synthetic":
            # herd's synthetic set (worker/data/synthetic_dataset.cc): standard-normal features labelled by
            # the argmax of a random linear teacher. Same shape and dtype, other values.
            g = torch.Generator().manual_seed(spec["seed"])
            teacher = torch.randn(spec["classes"], spec["features"], generator=g)
            self.x = torch.randn(spec["samples"], spec["features"], generator=g)
            self.y = self.x.matmul(teacher.t()).argmax(1)
            self.features, self.classes = spec["features"], spec["classes"]
        elif kind == "idx":
            self.x, self.y = load_images(spec["path"])
            self.features, self.classes = None, int(self.y.max()) + 1
        elif kind == "text":
            self.text = ct.load_split(spec["path"], train=True)
            self.features, self.classes = None, ct.VOCABULARY
        else:
            raise ValueError(f"data kind {kind!r}: expected synthetic, idx or text")
        self.kind = kind

    def size(self):
        return ct.window_count(self.text) if self.kind == "text" else len(self.x)

    def get(self, indices):
        if self.kind == "text":
            return ct.windows(self.text, indices)
        return self.x.index_select(0, indices), self.y.index_select(0, indices)

    def on_device(self, device):
        return DeviceData(self, device)


class DeviceData:
    """A Data's tensors copied to the device; get(indices on the device) gathers there."""

    def __init__(self, data, device):
        self.kind = data.kind
        if self.kind == "text":
            self.text = data.text.to(device)
            self.offsets = torch.arange(ct.CONTEXT + 1, device=device)
        else:
            self.x, self.y = data.x.to(device), data.y.to(device)

    def get(self, indices):
        if self.kind == "text":  # ct.windows, with the positions made on the device
            positions = (indices.mul(ct.CONTEXT).unsqueeze(1) + self.offsets).reshape(-1)
            w = self.text.index_select(0, positions).view(len(indices), ct.CONTEXT + 1).long()
            return w[:, :ct.CONTEXT].contiguous(), w[:, 1:].contiguous()
        return self.x.index_select(0, indices), self.y.index_select(0, indices)


def make_optimizer(spec, params):
    """PyTorch's defaults per optimizer (foreach on CUDA where PyTorch picks it), herd's hyperparameters."""
    if spec["name"] == "sgd":
        return torch.optim.SGD(params, lr=spec["lr"], momentum=spec.get("momentum", 0.0))
    if spec["name"] == "adamw":
        return torch.optim.AdamW(params, lr=spec["lr"], betas=(0.9, 0.999), eps=1e-8,
                                 weight_decay=spec.get("weight_decay", 0.01))
    raise ValueError(f"optimizer {spec['name']!r}: expected sgd or adamw")


class Peer:
    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.datasets = {}  # json of the data spec -> Data, kept across runs
        # One process group for every DDP run: world 1, NCCL on cuda, gloo on cpu.
        store = tempfile.NamedTemporaryFile(prefix="gpu-bench-pg-", delete=False).name
        os.unlink(store)
        dist.init_process_group("nccl" if self.cuda else "gloo", init_method=f"file://{store}", rank=0,
                                world_size=1)

    def data(self, spec):
        key = json.dumps(spec, sort_keys=True)
        if key not in self.datasets:
            self.datasets[key] = Data(spec)
        return self.datasets[key]

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def train(self, req):
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
        try:
            answer = self._train(req)  # its model, optimizer and tensors are freed on return
        finally:
            if self.cuda:
                torch.cuda.empty_cache()
        return answer

    def _train(self, req):
        data = self.data(req["data"])
        side = req["side"]
        if side not in SIDES:
            raise ValueError(f"side {side!r}: expected one of {', '.join(SIDES)}")
        batch, warmup, steps, interval = req["batch"], req["warmup"], req["steps"], req["log_interval"]
        if data.size() < (warmup + steps) * batch:
            raise ValueError(f"the dataset holds {data.size()} samples; {warmup + steps} steps of {batch} need more")
        compiled = side in ("compile", "compile_ro")
        if compiled:
            why = compile_unavailable()
            if why:
                return {"ok": False, "unavailable": True, "error": why}
            torch._dynamo.reset()  # each run compiles its own model, not under the last run's guards
        torch.manual_seed(req["seed"])
        model = models.build(req["model"], data.features, data.classes).to(self.device)
        parameters = sum(p.numel() for p in model.parameters())
        if side == "ddp":
            net = nn.parallel.DistributedDataParallel(model, device_ids=[self.device.index or 0] if self.cuda else None)
        elif compiled:
            net = torch.compile(model, mode="reduce-overhead" if side == "compile_ro" else None)
        else:
            net = model
        opt = make_optimizer(req["optimizer"], net.parameters())
        perm = torch.randperm(data.size(), generator=torch.Generator().manual_seed(req["seed"]))
        bf16 = req["precision"] == "bf16"
        batches = self.batches(side, data, perm, batch, warmup + steps)
        mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)

        def step(i):
            x, y = batches(i)
            if compiled and mark_step is not None:
                mark_step()  # reduce-overhead: this step's graph outputs may overwrite the last step's
            opt.zero_grad(set_to_none=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = ct.mean_cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss

        compile_seconds = None
        if compiled:
            def compile_step(i, train_step=step):
                """The first step compiles: timed apart, and a backend that cannot compile here is reported."""
                nonlocal compile_seconds
                if i > 0:
                    return train_step(i)
                began = time.perf_counter()
                try:
                    loss = train_step(0)
                    self.sync()
                except Exception as e:  # noqa: BLE001 - reported as unavailable, not failed
                    log(traceback.format_exc())
                    raise CompileFailed(f"torch.compile failed: {type(e).__name__}: {e}") from e
                compile_seconds = time.perf_counter() - began
                return loss
            step = compile_step
        self.sync()
        try:
            run = timed_loop(step, warmup, steps, self.sync, loss_every=interval)
        except CompileFailed as e:
            return {"ok": False, "unavailable": True, "error": str(e)}
        seconds = run["seconds"]
        peak = torch.cuda.max_memory_reserved(self.device) if self.cuda else None
        return {"ok": True, "samples_per_s": steps * batch / seconds, "seconds": seconds, "loss": run["loss"],
                "parameters": parameters, "peak_bytes": peak, "warmup_seconds": run["warmup_seconds"],
                "compile_seconds": compile_seconds}

    def batches(self, side, data, perm, batch, count):
        """batches(i) -> step i's (inputs, targets) on the device, the way `side` feeds its steps."""
        if side == "resident":
            # Copied once, before the timed steps; freed with the run, so its peak memory counts the set.
            resident = data.on_device(self.device)
            device_perm = perm.to(self.device)
            return lambda i: resident.get(device_perm[i * batch:(i + 1) * batch])
        if side == "loader":
            loader = torch.utils.data.DataLoader(PermutedBatches(data, perm, batch, count), batch_size=None,
                                                 shuffle=False, num_workers=LOADER_WORKERS, pin_memory=self.cuda,
                                                 prefetch_factor=2)
            it = iter(loader)

            def take(i):
                x, y = next(it)
                return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            return take

        def gather(i):
            x, y = data.get(perm[i * batch:(i + 1) * batch])
            if self.cuda:
                x = x.pin_memory().to(self.device, non_blocking=True)
                y = y.pin_memory().to(self.device, non_blocking=True)
            return x, y
        return gather


class PermutedBatches(torch.utils.data.Dataset):
    """Item i: batch i of the epoch permutation, gathered whole in a DataLoader worker (one item a batch, as
    a batch sampler with a batched __getitem__ would give)."""

    def __init__(self, data, perm, batch, count):
        self.data, self.perm, self.batch, self.count = data, perm, batch, count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        return self.data.get(self.perm[i * self.batch:(i + 1) * self.batch])


class CompileFailed(Exception):
    """torch.compile could not compile the first step here."""


def compile_unavailable():
    """Why torch.compile cannot run here, or None."""
    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (herd's spec `threads`)")
    a = p.parse_args()
    # Answers go to the original stdout; anything else that writes to fd 1 (a library's
    # message, a stray print) lands on stderr instead of in the protocol.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def answer(obj):
        answers.write(json.dumps(obj) + "\n")
        answers.flush()

    torch.set_num_threads(a.threads)
    # DataLoader workers pass batches as file descriptors over a Unix socket made under the temp dir;
    # a socket path is at most 107 bytes, which a deep $TMPDIR (Bazel's) exceeds.
    if len(tempfile.gettempdir()) > 60:
        tempfile.tempdir = "/tmp"
    if a.device == "cuda" and not torch.cuda.is_available():
        answer({"ok": False, "error": f"--device cuda: torch {torch.__version__} sees no GPU"})
        return 2
    peer = Peer(a.device)
    answer({"ok": True, "torch": torch.__version__, "device": a.device, "threads": a.threads,
            "device_name": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu"})
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "quit":
            break
        try:
            result = write_images(req) if req.get("op") == "write_images" else peer.train(req)
        except Exception as e:  # a failed run is reported; the next one may still work
            log(traceback.format_exc())
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        answer(result)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
