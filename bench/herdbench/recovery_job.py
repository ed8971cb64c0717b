"""The job that bench/recovery_bench.py and bench/drain_bench.py disturb: an mlp
on a large synthetic set, one step a log line, on 2 to 3 workers (or more)."""
import json
import os


def submit(cluster, extra="", samples=2000000, max_workers=3):
    """Submits the job (with `extra` spec lines) to a LocalCluster; returns its id."""
    spec = ("name: recovery-bench\nmodel: mlp\n"
            f"dataset: {{kind: synthetic, synthetic_samples: {samples}, synthetic_features: 64}}\n"
            "batch_size: 16\nepochs: 1\nlog_interval_steps: 1\nthreads: 1\n"
            f"min_workers: 2\nmax_workers: {max_workers}\nrestart_budget: 100\n" + extra)
    path = os.path.join(cluster.dir, "recovery.yaml")
    with open(path, "w") as f:
        f.write(spec)
    return json.loads(cluster.herd("submit", path, "-o", "json"))["id"]
