"""Real etcd members on loopback for the benchmarks (Debian's etcd-server),
started as coordinator/etcd/local_etcd.h starts them for the tests: each in
its own data folder under a fresh temporary folder, on free ports, killed
with the bench (setpriv --pdeathsig) and by stop()."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from herdbench.cluster import free_port

ETCD = "/usr/bin/etcd"


class LocalEtcd:
    def __init__(self, members=3, timeout=30):
        if not os.access(ETCD, os.X_OK):
            raise RuntimeError(f"{ETCD} is missing: install Debian's etcd-server (scripts/setup.sh does)")
        self.dir = tempfile.mkdtemp(prefix="herd-bench-etcd-")
        self.procs = []
        client_ports = [free_port() for _ in range(members)]
        peers = [f"e{i}=http://127.0.0.1:{free_port()}" for i in range(members)]
        self.endpoints = [f"127.0.0.1:{port}" for port in client_ports]
        try:
            for i in range(members):
                client_url = f"http://{self.endpoints[i]}"
                peer_url = peers[i].split("=", 1)[1]
                argv = ["/usr/bin/setpriv", "--pdeathsig", "KILL", "--", ETCD, f"--name=e{i}",
                        f"--data-dir={self.dir}/e{i}", f"--listen-client-urls={client_url}",
                        f"--advertise-client-urls={client_url}", f"--listen-peer-urls={peer_url}",
                        f"--initial-advertise-peer-urls={peer_url}", f"--initial-cluster={','.join(peers)}",
                        "--initial-cluster-state=new", f"--initial-cluster-token={self.dir}", "--logger=zap",
                        "--log-level=warn"]
                log = open(os.path.join(self.dir, f"e{i}.log"), "w")
                self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                   start_new_session=True))
            self._wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def store(self):
        """herd-coordinator's --store for these members."""
        return "etcd://" + ",".join(self.endpoints)

    def _wait_healthy(self, timeout):
        """Until every member says healthy (it is up and Raft has a leader)."""
        deadline = time.time() + timeout
        waiting = list(self.endpoints)
        while waiting:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"etcd exited with status {p.returncode} while starting (logs in {self.dir})")
            try:
                with urllib.request.urlopen(f"http://{waiting[0]}/health", timeout=2) as answer:
                    if json.load(answer).get("health") == "true":
                        waiting.pop(0)
                        continue
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"etcd member {waiting[0]} not healthy after {timeout} s (logs in {self.dir})")
            time.sleep(0.1)  # a member still starting refuses at once: do not spin

    def stop(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
