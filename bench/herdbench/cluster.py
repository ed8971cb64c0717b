"""A local herd cluster for the benchmarks: a coordinator, worker daemons and
the `herd` CLI, from binaries built with Bazel (build()) or given (--bin-dir),
and the environment herd's processes run in.
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Fashion-MNIST where Debian's dataset-fashion-mnist puts it; herd and the DDP peer read it there.
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


# What a LocalCluster runs, as paths under a bin dir, and their Bazel targets.
BINARIES = {"coordinator/herd-coordinator": "//coordinator:herd-coordinator",
            "worker/daemon/herd-worker": "//worker/daemon:herd-worker",
            "worker/train/herd-trainer": "//worker/train:herd-trainer", "client/herd": "//client:herd"}


def build():
    """Builds herd's binaries with Bazel; returns bazel-bin."""
    subprocess.run([os.path.join(ROOT, "scripts", "bazel.sh"), "build", *BINARIES.values()],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(["bazel", "info", "bazel-bin"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def missing_binaries(bin_dir):
    """The BINARIES that `bin_dir` lacks (a bin dir not built, or not a bin dir)."""
    return [path for path in BINARIES if not os.access(os.path.join(bin_dir, path), os.X_OK)]


def env_with_libs(lib_dir):
    """The environment for herd's processes with `lib_dir` first on LD_LIBRARY_PATH (a GPU bundle's lib/);
    None (inherit) without one. Never for Python: the bundle's libraries are herd's."""
    if not lib_dir:
        return None
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.realpath(lib_dir) + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def share_trainers_openblas_kernels(bin_dir, lib_dir=None):
    """Puts the OpenBLAS kernels herd's trainers run on (herd-trainer --probe-openblas) in OPENBLAS_CORETYPE for
    every process this bench starts, the DDP side's included: a trainer forces better kernels where OpenBLAS takes
    the CPU for a generic core (worker/train/optim/openblas_kernels.h), and a peer left on those would be no peer.
    Returns their name ("": not OpenBLAS, e.g. a GPU machine's LibTorch)."""
    out = subprocess.run([os.path.join(bin_dir, "worker", "train", "herd-trainer"), "--probe-openblas"],
                         capture_output=True, text=True, env=env_with_libs(lib_dir), check=True).stdout
    core = out.strip().partition("openblas_core")[2].strip()
    if core:
        os.environ["OPENBLAS_CORETYPE"] = core
    return core


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """A coordinator and `world` worker daemons, on loopback by default.

    `host` is the coordinator's address; `worker_hosts[i]` (listen address)
    and `worker_prefix(i)` (e.g. a testbed's `exec` into host i) place worker
    i elsewhere, as bench/wan_bench.py does with network-namespace hosts.
    `worker_args(i)` adds flags to worker i (bench/gpu_bench.py: `--device=cuda`,
    `--metrics-listen=127.0.0.1:0`; a `--metrics-listen` there replaces the
    default, which turns metrics off). `env`, if given, is the environment of
    every herd process, the CLI's included (e.g. LD_LIBRARY_PATH for a bundle).

    `store` (e.g. "etcd://...") replaces the coordinator's state dir, with
    `coordinator_args` added to it; `standbys` more coordinators on that store
    (only with etcd) then wait as standbys, after the workers, as
    procs[1 + world:]. The first coordinator leads; the workers and the CLI
    are given every coordinator's address (`coordinators`)."""

    def __init__(self, bin_dir, world, host="127.0.0.1", worker_hosts=None, worker_prefix=lambda i: [],
                 worker_args=lambda i: [], env=None, store=None, coordinator_args=(), standbys=0):
        self.bin = bin_dir
        self.env = env
        self.dir = tempfile.mkdtemp(prefix="herd-bench-")
        self.procs = []
        self.names = []
        self.address = f"{host}:{free_port()}"
        self.store = store
        self.coordinator_args = list(coordinator_args)
        self.standby_addresses = [f"{host}:{free_port()}" for _ in range(standbys)]
        self.coordinators = ",".join([self.address, *self.standby_addresses])
        try:
            self._start_all(bin_dir, world, worker_hosts, worker_prefix, worker_args)
        except BaseException:
            self.stop()  # no daemon outlives a cluster that failed to start
            raise

    def _start_all(self, bin_dir, world, worker_hosts, worker_prefix, worker_args):
        self.start_coordinator()
        self.worker_argv = []
        for i in range(world):
            listen = [f"--listen={worker_hosts[i]}"] if worker_hosts else []
            extra = list(worker_args(i))
            metrics = [] if any(a.startswith("--metrics-listen") for a in extra) else ["--metrics-listen="]
            self.worker_argv.append(worker_prefix(i) + [
                f"{bin_dir}/worker/daemon/herd-worker", f"--coordinator={self.coordinators}",
                f"--worker-id=worker-{i}", f"--work-dir={self.dir}/worker-{i}", *listen, *metrics,
                "--insecure-no-auth", f"--trainer-binary={bin_dir}/worker/train/herd-trainer",
                f"--ready-file={self.dir}/worker-{i}.json", *extra])
            self._start(self.worker_argv[i], f"worker-{i}")
        for i in range(world):
            self._wait_ready(f"{self.dir}/worker-{i}.json")
        for i, address in enumerate(self.standby_addresses):
            ready = self.standby_ready_file(i)
            self._start(self._coordinator_argv(address, ready), f"standby-{i}")
            self._wait_ready(ready)

    def standby_ready_file(self, i):
        """Standby i's --ready-file: "leading": false while it waits, true once it leads."""
        return f"{self.dir}/standby-{i}.json"

    def _coordinator_argv(self, address, ready):
        state = [f"--store={self.store}", *self.coordinator_args] if self.store else [f"--state-dir={self.dir}/state"]
        return [f"{self.bin}/coordinator/herd-coordinator", f"--listen={address}", "--metrics-listen=", *state,
                "--insecure-no-auth", f"--ready-file={ready}"]

    def restart_worker(self, i, wait=True):
        """Starts worker i's daemon again (after a kill: same id and work dir) as procs[1 + i]."""
        ready = f"{self.dir}/worker-{i}.json"
        if os.path.exists(ready):
            os.remove(ready)
        log = open(os.path.join(self.dir, f"worker-{i}.log"), "a")
        self.procs[1 + i] = subprocess.Popen(self.worker_argv[i], stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, env=self.env)
        if wait:
            self._wait_ready(ready, watch=[(self.procs[1 + i], f"worker-{i}")])

    def _wait_ready(self, path, timeout=60, watch=None):
        """Waits for a ready file; a watched herd process (default: all of them) that exits meanwhile (a
        missing shared library, a bad flag) fails the wait at once, with its log's tail. A restart watches
        only the process it started: others may have been killed on purpose."""
        deadline = time.time() + timeout
        watched = list(zip(self.procs, self.names)) if watch is None else watch
        while not (os.path.exists(path) and os.path.getsize(path) > 0):
            for p, name in watched:
                if p.poll() is not None:
                    with open(os.path.join(self.dir, name + ".log")) as f:
                        tail = f.read()[-2000:]
                    raise RuntimeError(f"{name} exited with status {p.returncode} before it was ready: {tail}")
            if time.time() > deadline:
                raise RuntimeError(f"timed out waiting for {path}")
            time.sleep(0.05)

    def start_coordinator(self):
        """Starts the coordinator as procs[0] (again, after a kill: same
        address and state dir, so the workers find it and it recovers)."""
        ready = f"{self.dir}/coordinator.json"
        if os.path.exists(ready):
            os.remove(ready)
        argv = self._coordinator_argv(self.address, ready)
        log = open(os.path.join(self.dir, "coordinator.log"), "a")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env)
        if self.procs:
            self.procs[0] = proc
        else:
            self.procs.append(proc)
            self.names.append("coordinator")
        self._wait_ready(ready, watch=[(proc, "coordinator")])
        if self.store:  # on etcd it answers first as a standby: wait until it leads
            wait_leading(ready, proc)

    def _start(self, argv, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.names.append(name)
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                           env=self.env))

    def herd(self, *args):
        out = subprocess.run([f"{self.bin}/client/herd", "--coordinator", self.coordinators, "--insecure-no-auth",
                              *args], capture_output=True, text=True, env=self.env)
        if out.returncode != 0:
            raise RuntimeError(f"herd {' '.join(args)}: {out.stderr}")
        return out.stdout

    def herd_json(self, *args):
        return json.loads(self.herd(*args, "-o", "json"))

    def run_job(self, spec, timeout=3600):
        """Submits the YAML `spec`, waits for the job to end; returns (id, status). Raises unless it succeeded."""
        path = os.path.join(self.dir, f"job-{time.time_ns()}.yaml")
        with open(path, "w") as f:
            f.write(spec)
        job = self.herd_json("submit", path)["id"]
        deadline = time.time() + timeout
        failures = 0
        while True:
            try:
                info = self.herd_json("status", job)
                failures = 0
            except RuntimeError:
                failures += 1  # a loaded 2-core machine can starve the coordinator for a moment
                if failures > 20:
                    raise
                time.sleep(1)
                continue
            if info["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            if time.time() > deadline:
                raise RuntimeError(f"job {job} did not finish in {timeout} s (logs in {self.dir})")
            time.sleep(0.5)
        if info["state"] != "SUCCEEDED":
            raise RuntimeError(f"job {job} {info['state']}: {info.get('reason')} (logs in {self.dir})")
        return job, info

    def stop(self):
        # SIGINT: a worker daemon stops at once (SIGTERM would drain its jobs first, up to
        # --drain-timeout-seconds, which a bench cut short by a timeout has no time for).
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def wait_leading(ready, proc, timeout=60):
    """Waits until a coordinator's ready file says "leading": true; returns the time.time() it saw it. Fails if
    `proc` exits meanwhile."""
    deadline = time.time() + timeout
    while True:
        try:
            with open(ready) as f:
                if json.load(f).get("leading"):
                    return time.time()
        except (OSError, ValueError):
            pass  # not written yet (it is replaced atomically, never half there)
        if proc.poll() is not None:
            raise RuntimeError(f"the coordinator exited with status {proc.returncode} before it led")
        if time.time() > deadline:
            raise RuntimeError(f"no \"leading\": true in {ready} after {timeout} s")
        time.sleep(0.02)


def pids_of(pattern):
    """Process ids whose command line matches the regex `pattern` (pgrep -f)."""
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def trainer_log(cluster, worker, job):
    """The trainer log of `job` on worker `worker` (an index) of a LocalCluster."""
    return os.path.join(cluster.dir, f"worker-{worker}", "jobs", job, "trainer.log")


def wait_world(cluster, job, world, timeout=120):
    """Waits until `job` has stepped on `world` workers; returns its status. Fails if it ended."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = cluster.herd_json("status", job)
        if info["state"] not in ("PENDING", "RUNNING"):
            raise RuntimeError(f"job {job} is {info['state']}: {info.get('reason')}")
        if info.get("world_size") == world and int(info.get("step", 0)) > 0:
            return info
        time.sleep(0.2)
    raise RuntimeError(f"job {job} never ran on {world} workers")
