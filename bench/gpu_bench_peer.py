"""The PyTorch side of bench/gpu_bench.py: one long-lived process that runs
PyTorch eager and PyTorch DDP (world 1: NCCL on cuda, gloo on cpu) training
runs on request, so one process start, CUDA context and process group serve
every run of a bench.

Protocol: one JSON object per line on stdin, one JSON answer per line on
stdout (logs go to stderr). The first line out is a greeting with the torch
version and the device's name. Requests:
  {"op": "write_images", "path": DIR, "train": N, "test": M, "seed": S}
      writes a synthetic IDX image set (1x28x28 uint8 images, 10 classes,
      each class a fixed random template plus noise) that herd's idx dataset
      and this process both read;
  {"op": "train", "side": "eager"|"ddp", "model": {...}, "data": {...},
   "optimizer": {...}, "precision": "fp32"|"bf16", "batch": B, "warmup": W,
   "steps": S, "log_interval": L, "seed": S}
      trains W untimed steps and S timed ones; answers samples/s, seconds,
      the last loss, the parameter count and the peak GPU memory reserved
      (torch.cuda.max_memory_reserved(); null on cpu);
  {"op": "quit"}.

The step is herd's (worker/train/trainer.cc): gather the batch from a host
dataset by the epoch permutation (index_select), pin it and copy it to the
device non_blocking, forward and loss under bf16 autocast when asked (herd's
MeanCrossEntropy: the summed cross entropy over the rows), zero the
gradients, backward, optimizer step. The loss is read on the host at the
same points herd reads it: the end of the warmup and every `log_interval`
timed steps. Timing: wall time over the timed steps, with
torch.cuda.synchronize() at both ends.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import char_transformer_torch as ct  # noqa: E402
import resnet_small_torch as rs  # noqa: E402
from synthetic_images import write_image_set  # noqa: E402


def log(*args):
    print("gpu_bench_peer:", *args, file=sys.stderr, flush=True)


def build_model(spec, features, classes):
    """herd's built-in models: mlp (Flatten, then Linear+ReLU per hidden width, then Linear), resnet_small,
    char_transformer."""
    name = spec["name"]
    if name == "mlp":
        widths = [features] + list(spec["hidden"])
        layers = [nn.Flatten()]
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers, nn.Linear(widths[-1], classes))
    if name == "resnet_small":
        return rs.ResnetSmall(in_channels=1, widths=spec.get("widths", (16, 32, 64)), classes=classes)
    if name == "char_transformer":
        return ct.CharTransformer(width=spec.get("width", ct.WIDTH), heads=spec.get("heads", ct.HEADS),
                                  layers=spec.get("layers", ct.LAYERS))
    raise ValueError(f"model {name!r}: expected mlp, resnet_small or char_transformer")


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


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
            images = read_idx(os.path.join(spec["path"], "train-images-idx3-ubyte"))
            labels = read_idx(os.path.join(spec["path"], "train-labels-idx1-ubyte"))
            # herd's idx dataset: N x 1 x H x W float in [0, 1], int64 labels.
            self.x = torch.from_numpy(images.copy()).float().div_(255).unsqueeze(1)
            self.y = torch.from_numpy(labels.astype(np.int64))
            self.features, self.classes = None, int(labels.max()) + 1
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


def mean_cross_entropy(logits, targets):
    """herd's MeanCrossEntropy: summed over every row (and position), divided by their count."""
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
    return total / max(targets.numel(), 1)


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
        batch, warmup, steps, interval = req["batch"], req["warmup"], req["steps"], req["log_interval"]
        if data.size() < (warmup + steps) * batch:
            raise ValueError(f"the dataset holds {data.size()} samples; {warmup + steps} steps of {batch} need more")
        torch.manual_seed(req["seed"])
        model = build_model(req["model"], data.features, data.classes).to(self.device)
        parameters = sum(p.numel() for p in model.parameters())
        if req["side"] == "ddp":
            net = nn.parallel.DistributedDataParallel(model, device_ids=[self.device.index or 0] if self.cuda else None)
        else:
            net = model
        opt = make_optimizer(req["optimizer"], net.parameters())
        perm = torch.randperm(data.size(), generator=torch.Generator().manual_seed(req["seed"]))
        bf16 = req["precision"] == "bf16"

        def step(i):
            x, y = data.get(perm[i * batch:(i + 1) * batch])
            if self.cuda:
                x = x.pin_memory().to(self.device, non_blocking=True)
                y = y.pin_memory().to(self.device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = mean_cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            return loss

        for i in range(warmup):
            loss = step(i)
        last_loss = float(loss) if warmup else float("nan")
        self.sync()
        start = time.perf_counter()
        for i in range(steps):
            loss = step(warmup + i)
            if (i + 1) % interval == 0:
                last_loss = float(loss)  # herd reads its loss at each log point
        self.sync()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_reserved(self.device) if self.cuda else None
        return {"ok": True, "samples_per_s": steps * batch / seconds, "seconds": seconds, "loss": last_loss,
                "parameters": parameters, "peak_bytes": peak}


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
