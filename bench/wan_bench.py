#!/usr/bin/python3
"""herd over slow links: all-reduce, parameter averaging (every K, fragments,
overlap, int8) and PyTorch DDP, 3 hosts of a testbed (tests/testbed).

A testbed of 3 hosts (network namespaces on a bridge, 198.18.0.0/15); the
coordinator on the bridge, one herd worker per host, every host's link
shaped to the same rate (tbf, each direction) and, with a delay, every
host's link holding each frame that long in each direction (the testbed's
relay: one-way host to host 2 x delay, round trip 4 x delay; host to the
coordinator 2 x delay round trip). For each link, model and
variant it runs one job of --steps steps (batch --batch per rank), one after
another, and reports per run:
  wall samples/s per rank (what a user sees, the figure the ratios use):
      herd: a rank's samples after the generation's first step over the wall
      time from that step's end to the last step's progress line (trainer
      log timestamps), so every round, commit, evaluation and re-form in
      between counts; DDP: timed steps between barriers (ddp_host_rank.py:
      all steps but the first 3), which hold nothing else;
  train samples/s per rank: a rank's samples over its time in training
      steps (the trainer's end-of-training summary line; evaluations and
      commits excluded), mean over ranks; DDP: as above;
  payload bytes/sample: what a rank handed to its collectives (the trainer's
      count: the same rule for every mode), per sample it trained;
  link bytes/sample: bytes the hosts' links carried out of the hosts
      (veth counters: collectives with their TCP/IP overhead, the control
      plane, the initial broadcast), per sample trained;
  x bound: wall samples/s over the lower of the variant's unshaped rate and
      the rate the link allows for the bytes it carried per sample (the
      latency-hiding target: 0.9 or more);
  eval: the job's final evaluation (after the same number of samples; DDP:
      char_transformer's, herd's evaluation in PyTorch).
ddp is the DDP peer (PyTorch DDP, gloo), one rank per host
(bench/ddp_host_rank.py): for mnist_cnn its CNN and step (SGD lr 0.05
momentum 0.9), for char_transformer herd's model, data, sampler and AdamW
settings (bench/herdbench/ddp_peer.py, the same --lr and --schedule as
herd's runs; the parameter count is checked against herd's trainer log).
Runs of every-step sync (allreduce, ddp) on links at or below
--slow-link-rate use --slow-steps steps: their throughput is flat after a
few steps, and a full run at 10 Mbit/s would take an hour.

Sites (--sites 2 --hosts-per-site 2): the hosts in sites, unshaped inside,
and each link of --links is the WAN between two sites (its rate on each
site's link, its one-way delay between two sites); a testbed per link. Link
bytes are what the sites sent over the WAN. Workers carry the label site=sN,
so the islands variants (sync.islands_by: site) all-reduce inside a site and
average across; stream32_t8 is the same averaging of every rank (flat).
  --sites 2 --links none,50mbit@40ms --variants islands32_t8,stream32_t8,allreduce,ddp

Usage: bench/wan_bench.py [--links none,1gbit,100mbit,10mbit] [--delay-ms 0] [--sites N --hosts-per-site M]
         [--models mnist_cnn,char_transformer]  (MODEL or MODEL@BATCH: the step-time axis,
                                                  e.g. mnist_cnn@4,mnist_cnn@16,mnist_cnn@64)
         [--variants allreduce,avg16,avg16_int8,stream16,ddp]
         [--steps 96] [--slow-steps 12] [--batch 64] [--epochs 0] [--repeats 1] [--bin-dir bazel-bin]
         [--variant NAME='{sync spec}' ...] [--lr NAME=LR ...] [--schedule constant|cosine]
         [--corpus licenses|copyrights] [--data-plane-lanes N]
A link is a tbf rate or none, with an optional one-way delay per host:
"100mbit@50ms"; links without one get --delay-ms (default 0), e.g.
  --links none,100mbit@50ms,10mbit@25ms
is the unshaped, undelayed baseline and two WAN settings.
--repeats N runs the whole matrix N times over (links interleaved, since
load from other processes drifts over minutes) and reports the median
samples/s of each cell.
--epochs N runs N epochs instead of --steps (the quality comparison;
mnist_cnn's DDP peer, which has no eval, still runs --steps).
Needs root (CAP_NET_ADMIN); build first:
  scripts/bazel.sh build //coordinator:herd-coordinator //worker/daemon:herd-worker \\
    //worker/train:herd-trainer //client:herd //tests/testbed:herd-testbed
Prints one line per run, a table, and a final JSON line.
"""
import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

from herdbench.cluster import FASHION_MNIST, ROOT, LocalCluster, free_port, share_trainers_openblas_kernels
from herdbench.herd_vs_ddp import DDP_PYTHON
from herdbench.trainer_logs import SUMMARY

HOSTS = 3
# Named sync settings; "ddp" is PyTorch DDP.
# The outer Nesterov step uses lr 0.4, momentum 0.8: DiLoCo's 0.7 / 0.9 (the
# spec's defaults) cost mnist_cnn 1.9 points of accuracy after 2 epochs at
# K=16, these gained 1.2 (bench/README, "Quality").
OUTER = "outer: {kind: nesterov, lr: 0.4, momentum: 0.8}"
VARIANTS = {
    "allreduce": "{mode: allreduce}",
    "avg16": f"{{mode: average, every: 16, {OUTER}}}",
    "avg16_bf16": f"{{mode: average, every: 16, {OUTER}, compression: bf16}}",
    "avg16_int8": f"{{mode: average, every: 16, {OUTER}, compression: int8}}",
    "stream16": f"{{mode: average, every: 16, fragments: 4, overlap: true, {OUTER}, compression: int8}}",
    "stream8": f"{{mode: average, every: 8, fragments: 4, overlap: true, {OUTER}, compression: int8}}",
    "stream16_f32": f"{{mode: average, every: 16, fragments: 4, overlap: true, {OUTER}}}",
    # The 10 Mbit/s setting (bench/README): a round every 32 steps.
    "stream32": f"{{mode: average, every: 32, fragments: 4, overlap: true, {OUTER}, compression: int8}}",
    # WAN latency: each round lands 8 steps after its launch
    # (Streaming DiLoCo's tau), when the fragment's next round starts.
    "stream32_t8": f"{{mode: average, every: 32, fragments: 4, overlap_steps: 8, {OUTER}, compression: int8}}",
    # tau from what the rounds measure (docs/job-spec.md, overlap_steps: auto).
    "stream32_auto": f"{{mode: average, every: 32, fragments: 4, overlap_steps: auto, {OUTER}, compression: int8}}",
    "stream16_auto": f"{{mode: average, every: 16, fragments: 4, overlap_steps: auto, {OUTER}, compression: int8}}",
    # Sites (--sites): gradients all-reduced inside a site every step, the
    # sites averaged as stream32_t8 averages every rank (docs/design.md, Islands).
    "islands32_t8": (f"{{mode: average, every: 32, fragments: 4, overlap_steps: 8, {OUTER}, compression: int8, "
                     f"islands_by: site}}"),
    "islands16_t8": (f"{{mode: average, every: 16, fragments: 4, overlap_steps: 8, {OUTER}, compression: int8, "
                     f"islands_by: site}}"),
}
EVERY_STEP = ("allreduce", "ddp")
# Real English text for char_transformer: the system's license texts.
LICENSES = "/usr/share/common-licenses"
# A longer corpus (--corpus copyrights): the packages' copyright files, about
# 20 MB here, cut at COPYRIGHTS_BYTES. With the licenses' ~18 steps per
# epoch, every epoch-end evaluation forces a full averaging round; a corpus
# of hundreds of steps per epoch shows the payload ratio of K alone.
COPYRIGHTS = "/usr/share/doc"
COPYRIGHTS_BYTES = 4 << 20


def corpus_files(corpus):
    if corpus == "licenses":
        names = sorted(os.listdir(LICENSES))
        return [os.path.join(LICENSES, n) for n in names]
    return sorted(os.path.join(COPYRIGHTS, d, "copyright") for d in os.listdir(COPYRIGHTS))


def parse_link(link, default_delay_ms):
    """"100mbit@50ms" -> ("100mbit", 50); "none" -> ("none", default)."""
    m = re.fullmatch(r"(none|\d+[kmg]?bit)(?:@(\d+)ms)?", link)
    if not m:
        raise ValueError(f"link {link!r}: expected none or a rate (e.g. 100mbit), optionally @DELAYms (e.g. 100mbit@50ms)")
    return m.group(1), int(m.group(2)) if m.group(2) is not None else default_delay_ms


def rate_bits(rate):
    m = re.fullmatch(r"(\d+)([kmg]?)bit", rate)
    if not m:
        raise ValueError(f"link rate {rate!r}: expected e.g. 100mbit")
    return int(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


class Testbed:
    """HOSTS hosts on one bridge, or (sites > 0) sites of hosts_per_site hosts
    each, joined by a WAN link of rate `wan_rate` ("none": unshaped) and one-way
    delay `wan_delay_ms` between two sites."""

    def __init__(self, tb, sites=0, hosts_per_site=0, wan_rate="none", wan_delay_ms=0):
        self.tb = tb
        up = [tb, "up", "--hosts", str(HOSTS)]
        if sites:
            up = [tb, "up", "--sites", str(sites), "--hosts-per-site", str(hosts_per_site),
                  "--wan-delay-ms", str(wan_delay_ms)] + ([] if wan_rate == "none" else ["--wan-rate", wan_rate])
        self.bed = json.loads(subprocess.check_output(up))
        self.name = self.bed["name"]
        self.hosts = self.bed["hosts"]
        self.sites = self.bed.get("sites") or []
        self.delay_ms = 0

    def shape(self, rate):
        for i in range(len(self.hosts)):
            if rate == "none":
                subprocess.run([self.tb, "unshape", self.name, f"h{i}"], check=True, capture_output=True)
            else:
                subprocess.run([self.tb, "shape", self.name, f"h{i}", rate], check=True, capture_output=True)

    def delay(self, ms):
        """One-way delay of every host's link, each direction (a relay per host once non-zero)."""
        if ms == self.delay_ms:
            return
        for i in range(len(self.hosts)):
            subprocess.run([self.tb, "delay", self.name, f"h{i}", str(ms)], check=True, capture_output=True)
        self.delay_ms = ms

    def sent_bytes(self):
        """Bytes each host has sent over its link (its veth's bridge end
        receives them); with sites, bytes each site sent over the WAN (its
        link's port on the core bridge receives them)."""
        ports = [site["core_port"] for site in self.sites] if self.sites else [h["veth"] for h in self.hosts]
        out = []
        for port in ports:
            with open(f"/sys/class/net/{port}/statistics/rx_bytes") as f:
                out.append(int(f.read()))
        return out

    def exec_prefix(self, i):
        return [self.tb, "exec", self.name, self.hosts[i]["name"], "--"]

    def down(self):
        subprocess.run([self.tb, "down", self.name], capture_output=True)


class TestbedCluster(LocalCluster):
    """The coordinator on the bridge, one herd worker per testbed host."""

    def __init__(self, bin_dir, bed, lanes=None):
        self.world = len(bed.hosts)
        # Each worker carries its site as a label (sync.islands_by: site).
        lane_args = [] if lanes is None else [f"--data-plane-lanes={lanes}"]
        super().__init__(bin_dir, self.world, host=bed.bed["root_address"],
                         worker_hosts=[h["address"] for h in bed.hosts], worker_prefix=bed.exec_prefix,
                         worker_args=lambda i: [f"--label=site=s{bed.hosts[i].get('site', 0)}"] + lane_args)

    def wall(self, job):
        """(steps after the first, all steps, wall seconds) from the log of the
        rank that logs progress: the first step's end to the last step's
        progress line."""
        for i in range(self.world):
            with open(f"{self.dir}/worker-{i}/jobs/{job}/trainer.log") as f:
                log = f.read()
            last = [m for m in PROGRESS.finditer(log) if m.group(3) == m.group(4)]
            first = FIRST_STEP.search(log)
            if last and first:
                total = int(last[0].group(3))
                return total - int(first.group(2)), total, log_time(last[0].group(1)) - log_time(first.group(1))
        raise RuntimeError(f"no first-step and last-step lines in any trainer.log of {job}")

    def summaries(self, job):
        out = []
        for i in range(self.world):
            with open(f"{self.dir}/worker-{i}/jobs/{job}/trainer.log") as f:
                log = f.read()
            m = SUMMARY.search(log)
            if not m:
                raise RuntimeError(f"no sync summary in worker-{i}'s trainer.log for {job}")
            waited = WAITED.search(log)
            phases = ROUND_PHASES.search(log)
            out.append({"bytes": int(m.group(3)), "samples": int(m.group(5)), "seconds": float(m.group(6)),
                        "waited": float(waited.group(1)) if waited else None,
                        "round_phases": phases.group(1) if phases else None})
        return out


# The inner optimizer per model; --lr NAME=LR overrides the rate per variant.
OPTIMIZERS = {"char_transformer": ("adamw", 0.001, ""), "mnist_cnn": ("sgd", 0.05, ", momentum: 0.9")}


def job_spec(model, sync, args, steps, text, world, lr=None):
    dataset = (f"{{kind: text, path: {text}}}" if model == "char_transformer" else f"{{kind: idx, path: {FASHION_MNIST}}}")
    name, default_lr, rest = OPTIMIZERS[model]
    optimizer = f"{{name: {name}, lr: {default_lr if lr is None else lr}{rest}}}"
    length = f"epochs: {args.epochs}\n" if args.epochs else f"max_steps: {steps}\n"
    return (f"name: wan-{model}\nmodel: {model}\ndataset: {dataset}\nbatch_size: {args.batch}\n{length}"
            f"optimizer: {optimizer}\nschedule: {{name: {args.schedule}}}\nsync: {sync}\neval: {{max_samples: {args.eval_samples}}}\n"
            f"min_workers: {world}\nmax_workers: {world}\nseed: 1\nthreads: 1\n")


PARAMETERS = re.compile(r" with (\d+) parameters")
# The sync summary's time blocked on the network (rounds, all-reduce steps).
WAITED = re.compile(r"; waited ([0-9.]+) s \(")
# The averaging summary's round timeline and tau (round_timeline.h): where a
# round's time went on that rank.
ROUND_PHASES = re.compile(r"; (per round: launch [^;]*; in flight [^;]*(?:; last TCP window [^;]*)?(?:; overlap_steps [^;\n]*)?(?:; int8 rounds [^;\n]*)?)")
# glog's prefix (I20261126 13:16:51.785889) on the trainer's lines.
GLOG_TIME = r"^I(\d{8} \d\d:\d\d:\d\d\.\d{6})"
PROGRESS = re.compile(GLOG_TIME + r" +\d+ \S+\] (step (\d+)/(\d+) epoch)", re.M)
FIRST_STEP = re.compile(GLOG_TIME + r" +\d+ \S+\] step (\d+): the generation's first step is done", re.M)


def log_time(stamp):
    return datetime.datetime.strptime(stamp, "%Y%m%d %H:%M:%S.%f").timestamp()


def run_herd(cluster, bed, model, variant, args, steps, text):
    before = bed.sent_bytes()
    job, info = cluster.run_job(job_spec(model, VARIANTS[variant], args, steps, text, cluster.world,
                                         args.lr.get(variant)))
    sent = sum(b - a for a, b in zip(before, bed.sent_bytes()))
    ranks = cluster.summaries(job)
    with open(f"{cluster.dir}/worker-0/jobs/{job}/trainer.log") as f:
        m = PARAMETERS.search(f.read())
    samples = sum(r["samples"] for r in ranks)
    steps_after_first, total_steps, wall_seconds = cluster.wall(job)
    # A rank's samples after the first step (exact while every step is full).
    wall_samples = samples / len(ranks) * steps_after_first / total_steps
    return {"samples_per_s_per_rank": wall_samples / wall_seconds,
            "train_samples_per_s_per_rank": sum(r["samples"] / r["seconds"] for r in ranks) / len(ranks),
            "wall_seconds": round(wall_seconds, 2),
            "sync_wait_fraction": (round(sum(r["waited"] for r in ranks) / sum(r["seconds"] for r in ranks), 3)
                                   if all(r["waited"] is not None for r in ranks) else None),
            "payload_bytes_per_sample": ranks[0]["bytes"] / ranks[0]["samples"],
            "link_bytes_per_sample": sent / samples, "samples": samples, "eval": info.get("eval", {}),
            "parameters": int(m.group(1)) if m else None, "round_phases": ranks[0]["round_phases"]}


def run_ddp(bed, model, args, steps, text):
    world = len(bed.hosts)
    port = free_port()
    master = bed.hosts[0]["address"]
    before = bed.sent_bytes()
    procs = [subprocess.Popen(bed.exec_prefix(i) + [
        DDP_PYTHON, os.path.join(ROOT, "bench", "ddp_host_rank.py"), "--rank", str(i), "--world", str(world),
        "--master", master, "--port", str(port), "--steps", str(steps), "--warmup", "3", "--batch", str(args.batch),
        "--model", model] + ([
            "--text", text, "--lr", str(args.lr.get("ddp", OPTIMIZERS[model][1])), "--schedule", args.schedule,
            "--epochs", str(args.epochs), "--seed", "1", "--eval-samples", str(args.eval_samples)]
            if model == "char_transformer" else []),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(world)]
    outs = [p.communicate(timeout=3600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"ddp rank failed: {err[-2000:]}")
    sent = sum(b - a for a, b in zip(before, bed.sent_bytes()))
    result = json.loads(outs[0][0].strip().splitlines()[-1])
    return {"samples_per_s_per_rank": result["samples_per_s_per_rank"],
            "train_samples_per_s_per_rank": result["samples_per_s_per_rank"], "payload_bytes_per_sample": None,
            "link_bytes_per_sample": sent / result["samples"], "samples": result["samples"],
            "eval": result["eval"], "parameters": result["parameters"]}


def run_link(cluster, bed, link, rate, delay_ms, shapes, variants, args, text, repeat, herd_parameters):
    """Every model shape and variant on one link setting: one result per run."""
    slow_bits = rate_bits(args.slow_link_rate)
    runs = []
    for shape, (model, shape_args) in shapes.items():
        for variant in variants:
            slow = rate != "none" and rate_bits(rate) <= slow_bits and variant in EVERY_STEP
            steps = args.slow_steps if slow and not args.epochs else args.steps
            r = run_ddp(bed, model, shape_args, steps, text) if variant == "ddp" else \
                run_herd(cluster, bed, model, variant, shape_args, steps, text)
            if variant != "ddp":
                herd_parameters[model] = r["parameters"]
            elif herd_parameters.get(model) and r["parameters"] != herd_parameters[model]:
                raise RuntimeError(f"the DDP peer's {model} has {r['parameters']} parameters, "
                                   f"herd's {herd_parameters[model]}")
            by_epochs = args.epochs and not (variant == "ddp" and model == "mnist_cnn")
            r.update(link=link, rate=rate, delay_ms=delay_ms, model=shape, batch=shape_args.batch,
                     variant=variant,
                     steps=None if by_epochs else steps,
                     epochs=args.epochs if by_epochs else None, repeat=repeat,
                     lr=args.lr.get(variant, OPTIMIZERS[model][1]),
                     link_bound=(rate_bits(rate) / 8 / r["link_bytes_per_sample"]
                                 if rate != "none" and r["link_bytes_per_sample"] else None))
            runs.append(r)
            payload = "-" if r["payload_bytes_per_sample"] is None else f"{r['payload_bytes_per_sample']:.0f}"
            evals = " ".join(f"{k} {v:.4f}" for k, v in sorted(r["eval"].items()))
            print(f"[{repeat + 1}/{args.repeats}] {link:12} {model:16} {variant:12} "
                  f"{r['samples_per_s_per_rank']:8.1f} wall samples/s/rank "
                  f"({r['train_samples_per_s_per_rank']:.1f} in steps, "
                  f"{'-' if r.get('sync_wait_fraction') is None else r['sync_wait_fraction']} waiting) "
                  f"payload {payload:>8} B/sample "
                  f"link {r['link_bytes_per_sample']:9.0f} B/sample {evals}", flush=True)
            if r.get("round_phases"):
                print(f"      rank 0's rounds: {r['round_phases']}", flush=True)
    return runs


def main():
    # A SIGTERM (timeout, kill) still stops the cluster and tears the testbed down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--links", default="none,1gbit,100mbit,10mbit")
    p.add_argument("--models", default="mnist_cnn,char_transformer")
    p.add_argument("--variants", default="allreduce,avg16,avg16_int8,stream16,ddp")
    p.add_argument("--steps", type=int, default=96)
    p.add_argument("--delay-ms", type=int, default=0,
                   help="one-way delay per host, each direction, for links without their own @DELAYms "
                        "(host to host: 2x one way, 4x round trip)")
    p.add_argument("--slow-steps", type=int, default=12)
    p.add_argument("--slow-link-rate", default="100mbit")
    p.add_argument("--epochs", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--data-plane-lanes", type=int, default=None,
                   help="herd-worker --data-plane-lanes (connections per pair of ranks, one collective on each "
                        "at a time); default: the worker's own default")
    p.add_argument("--sites", type=int, default=0,
                   help="sites of --hosts-per-site hosts each (unshaped inside), joined by the links of --links "
                        "(each a rate@delay between two sites); workers carry the label site=sN")
    p.add_argument("--hosts-per-site", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--eval-samples", type=int, default=2000)
    p.add_argument("--corpus", default="licenses", choices=["licenses", "copyrights"],
                   help="char_transformer's text: the license texts (~18 steps per epoch) or the packages' "
                        "copyright files (4 MB, hundreds of steps per epoch)")
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "bazel-bin"))
    p.add_argument("--variant", action="append", default=[], metavar="NAME=SYNC",
                   help="define another variant from a sync spec, e.g. "
                        "'avg16_plain={mode: average, every: 16, outer: {kind: none}}' (repeatable)")
    p.add_argument("--schedule", default="constant", choices=["constant", "cosine"],
                   help="the learning-rate schedule of every run (docs/job-spec.md, schedule.name)")
    p.add_argument("--lr", action="append", default=[], metavar="NAME=LR",
                   help="the inner optimizer's learning rate for variant NAME (default: adamw 0.001 for "
                        "char_transformer, sgd 0.05 for mnist_cnn), e.g. 'avg8=0.002' (repeatable); "
                        "'ddp=LR' sets char_transformer's DDP rate (mnist_cnn's DDP step is fixed)")
    args = p.parse_args()
    lrs = {}
    for v in args.lr:
        name, sep, lr = v.partition("=")
        try:
            lrs[name] = float(lr)
        except ValueError:
            p.error(f"--lr: expected NAME=LR with a number, got {v!r}")
        if not sep or not name or lrs[name] <= 0:
            p.error(f"--lr: expected NAME=LR with LR > 0, got {v!r}")
    args.lr = lrs
    for v in args.variant:
        name, sep, sync = v.partition("=")
        if not sep or not name or not sync.strip().startswith("{"):
            p.error(f"--variant: expected NAME={{sync spec}}, got {v!r}")
        VARIANTS[name] = sync
    bin_dir = os.path.realpath(args.bin_dir)
    share_trainers_openblas_kernels(bin_dir)
    links, models, variants = args.links.split(","), args.models.split(","), args.variants.split(",")
    # MODEL@BATCH: a shape of its own (its own step time), batch per rank.
    shapes = {}
    for shape in models:
        name, _, batch = shape.partition("@")
        if name not in OPTIMIZERS or (batch and not batch.isdigit()):
            p.error(f"--models: expected MODEL or MODEL@BATCH with MODEL one of {', '.join(OPTIMIZERS)}, got {shape!r}")
        shape_args = argparse.Namespace(**vars(args))
        shape_args.batch = int(batch) if batch else args.batch
        shapes[shape] = (name, shape_args)
    models = [name for name, _ in shapes.values()]
    if args.sites and not (2 <= args.sites <= 20 and 1 <= args.hosts_per_site <= 20):
        p.error(f"--sites {args.sites} --hosts-per-site {args.hosts_per_site}: expected 2..20 sites of 1..20 hosts")
    if args.sites and args.delay_ms:
        p.error("--delay-ms: with --sites, give each link its delay (e.g. 50mbit@40ms)")
    if not 0 <= args.delay_ms <= 10000:
        p.error(f"--delay-ms: {args.delay_ms} is not in 0..10000")
    try:
        link_settings = {link: parse_link(link, args.delay_ms) for link in links}
    except ValueError as e:
        p.error(f"--links: {e}")
    for v in variants:
        if v != "ddp" and v not in VARIANTS:
            p.error(f"--variants: unknown {v!r} (known: {', '.join(VARIANTS)}, ddp)")
    for v in args.lr:
        if v not in variants:
            p.error(f"--lr: {v!r} is not a variant in --variants")
        if v == "ddp" and "mnist_cnn" in models:
            p.error("--lr: ddp's rate applies to char_transformer only (mnist_cnn's DDP step is "
                    "compare_ddp's, lr 0.05); run --models char_transformer")
    text = None
    if "char_transformer" in models:
        text = os.path.join(tempfile.mkdtemp(prefix="herd-wan-text-"), f"{args.corpus}.txt")
        limit = COPYRIGHTS_BYTES if args.corpus == "copyrights" else None
        written = 0
        with open(text, "wb") as out:
            for path in corpus_files(args.corpus):
                if os.path.isfile(path) and not os.path.islink(path) and (limit is None or written < limit):
                    with open(path, "rb") as f:
                        data = f.read()
                    if limit is not None:
                        data = data[:limit - written]
                    out.write(data)
                    written += len(data)
    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}, {f'{args.sites} sites x {args.hosts_per_site} hosts' if args.sites else f'{HOSTS} hosts'}, batch {args.batch}/rank, lr schedule {args.schedule}, "
          f"{f'{args.epochs} epochs' if args.epochs else f'{args.steps} steps ({args.slow_steps} for every-step sync at <= {args.slow_link_rate})'}",
          flush=True)
    tb = os.path.join(bin_dir, "tests", "testbed", "herd-testbed")
    bed = cluster = None
    runs = []
    herd_parameters = {}  # model -> herd's count, to check the DDP peer's model against
    try:
        if not args.sites:
            bed = Testbed(tb)
            cluster = TestbedCluster(bin_dir, bed, args.data_plane_lanes)
        for repeat in range(args.repeats):
            for link in links:
                rate, delay_ms = link_settings[link]
                if args.sites:
                    # The WAN's rate and delay are set as the sites come up.
                    bed = Testbed(tb, args.sites, args.hosts_per_site, rate, delay_ms)
                    cluster = TestbedCluster(bin_dir, bed, args.data_plane_lanes)
                else:
                    bed.shape(rate)
                    bed.delay(delay_ms)
                try:
                    runs += run_link(cluster, bed, link, rate, delay_ms, shapes, variants, args, text, repeat,
                                     herd_parameters)
                finally:
                    if args.sites:
                        cluster.stop()
                        bed.down()
                        bed = cluster = None
    finally:
        if cluster:
            cluster.stop()
        if bed:
            bed.down()
    # One result per cell: the median run by samples/s (its other figures with it).
    cells = {}
    for r in runs:
        cells.setdefault((r["link"], r["model"], r["variant"]), []).append(r)
    results = []
    for cell in cells.values():
        cell.sort(key=lambda r: r["samples_per_s_per_rank"])
        median = dict(cell[(len(cell) - 1) // 2])
        median["samples_per_s_runs"] = [round(r["samples_per_s_per_rank"], 1) for r in cell]
        median.pop("repeat")
        results.append(median)
    # Ratios against the same variant unshaped and undelayed, and against DDP on the same link.
    by = {(r["link"], r["model"], r["variant"]): r for r in results}
    baseline = next((link for link in links if link_settings[link] == ("none", 0)), None)
    for r in results:
        base = by.get((baseline, r["model"], r["variant"]))
        ddp = by.get((r["link"], r["model"], "ddp"))
        ar = by.get((r["link"], r["model"], "allreduce"))
        r["vs_unshaped"] = round(r["samples_per_s_per_rank"] / base["samples_per_s_per_rank"], 3) if base else None
        r["vs_ddp"] = round(r["samples_per_s_per_rank"] / ddp["samples_per_s_per_rank"], 2) if ddp else None
        r["payload_reduction_vs_allreduce"] = (
            round(ar["payload_bytes_per_sample"] / r["payload_bytes_per_sample"], 1)
            if ar and r["payload_bytes_per_sample"] else None)
        # The target's yardstick: the lower of the variant's unshaped rate
        # and what the link's rate allows for the bytes it carried per sample.
        bounds = [b for b in (base["samples_per_s_per_rank"] if base else None, r["link_bound"]) if b]
        r["vs_bound"] = round(r["samples_per_s_per_rank"] / min(bounds), 3) if bounds else None
    print(f"\n{'link':12} {'model':16} {'variant':12} {'wall sps/rank':>14} {'x unshaped':>10} {'x bound':>7} "
          f"{'x ddp':>6} {'payload B/s':>11} {'x fewer':>7} {'link B/s':>9}  eval")
    for r in results:
        payload = "-" if r["payload_bytes_per_sample"] is None else f"{r['payload_bytes_per_sample']:.0f}"
        evals = " ".join(f"{k} {v:.4f}" for k, v in sorted(r["eval"].items()))
        print(f"{r['link']:12} {r['model']:16} {r['variant']:12} {r['samples_per_s_per_rank']:14.1f} "
              f"{r['vs_unshaped'] or '-':>10} {r['vs_bound'] or '-':>7} {r['vs_ddp'] or '-':>6} {payload:>11} "
              f"{r['payload_reduction_vs_allreduce'] or '-':>7} {r['link_bytes_per_sample']:9.0f}  {evals}")
    for r in results:
        r["samples_per_s_per_rank"] = round(r["samples_per_s_per_rank"], 1)
        r["train_samples_per_s_per_rank"] = round(r["train_samples_per_s_per_rank"], 1)
        r["link_bytes_per_sample"] = round(r["link_bytes_per_sample"], 1)
        if r["payload_bytes_per_sample"] is not None:
            r["payload_bytes_per_sample"] = round(r["payload_bytes_per_sample"], 1)
    print(json.dumps({"bench": "wan", "hosts": args.sites * args.hosts_per_site if args.sites else HOSTS, "sites": args.sites, "delay_ms": args.delay_ms, "batch": args.batch, "steps": args.steps, "repeats": args.repeats,
                      "slow_steps": args.slow_steps, "epochs": args.epochs, "schedule": args.schedule, "cores": os.cpu_count(),
                      "load_average_1m": os.getloadavg()[0], "results": results}))


if __name__ == "__main__":
    sys.exit(main())
