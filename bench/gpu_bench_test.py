#!/usr/bin/python3
"""The parts of bench/gpu_bench.py and scripts/gpu_check_summary.py that only
a GPU run reaches, tested on the CPU: herd's job spec for cuda and bf16, the
memory metric scraped from a /metrics page, the targets judged on cuda only,
and the check's summary (gtest's JSON report, a skipped part failing a cuda
check, a bench cut short).

Run: bazel test //bench:gpu_bench_test, or python3 bench/gpu_bench_test.py
"""
import argparse
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import unittest

import gpu_bench

HERE = os.path.dirname(os.path.abspath(__file__))

SUMMARY = os.path.join(os.path.dirname(HERE), "scripts", "gpu_check_summary.py")


def bench_args(device):
    return argparse.Namespace(device=device, warmup=50, steps=None, threads=8)


class HerdSpecTest(unittest.TestCase):
    def test_cuda_bf16_spec_asks_for_autocast_on_the_gpu(self):
        bench = gpu_bench.Bench(bench_args("cuda"), "/tmp")
        shape = gpu_bench.shape_for("mlp4096_b256", "cuda")
        spec = bench.herd_spec("mlp4096_b256", shape, "bf16", "{kind: synthetic}")
        for line in ("device: cuda", "bf16_autocast: true", "batch_size: 256", "max_steps: 550",
                     "log_interval_steps: 50", "threads: 8", "model: {name: mlp, hidden: [4096, 4096]}",
                     "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}"):
            self.assertIn(line + "\n", spec)
        self.assertNotIn("bf16_autocast", bench.herd_spec("mlp4096_b256", shape, "fp32", "{kind: synthetic}"))

    def test_cuda_graphs_flag_reaches_herds_spec(self):
        args = bench_args("cuda")
        shape = gpu_bench.shape_for("mlp1024_b64", "cuda")
        self.assertNotIn("cuda_graphs", gpu_bench.Bench(args, "/tmp").herd_spec("mlp1024_b64", shape, "fp32", "{}"))
        args.cuda_graphs = True
        self.assertIn("cuda_graphs: true\n", gpu_bench.Bench(args, "/tmp").herd_spec("mlp1024_b64", shape, "fp32", "{}"))

    def test_dataset_outlasts_the_run_so_no_epoch_ends_inside_it(self):
        bench = gpu_bench.Bench(bench_args("cuda"), "/tmp")
        shape = gpu_bench.shape_for("resnet_small_b128", "cuda")
        self.assertEqual(bench.samples(shape), (50 + 200 + 1) * 128)

    def test_char_transformer_trains_with_adamw(self):
        bench = gpu_bench.Bench(bench_args("cuda"), "/tmp")
        shape = gpu_bench.shape_for("char_transformer_b64", "cuda")
        spec = bench.herd_spec("char_transformer_b64", shape, "fp32", "{kind: text, path: /x}")
        self.assertIn("optimizer: {name: adamw, lr: 0.001, weight_decay: 0.01}\n", spec)
        self.assertIn("model: char_transformer\n", spec)


class StepTimesTest(unittest.TestCase):
    def test_the_last_steps_first_line_counts_not_its_final_one(self):
        log = os.path.join(tempfile.mkdtemp(), "trainer.log")
        with open(log, "w") as f:
            f.write("I20261126 09:34:02.500000  5669 trainer.cc:447] step 50/100 epoch 0 loss 2.3 325 samples/s\n"
                    "I20261126 09:34:03.500000  5669 trainer.cc:447] step 100/100 epoch 0 loss 2.2 1434 samples/s\n"
                    "I20261126 09:34:03.600000  5669 trainer.cc:384] eval at step 100 (epoch 0): loss 2.3\n"
                    "I20261126 09:34:09.000000  5669 trainer.cc:447] step 100/100 epoch 0 loss 2.2 7 samples/s (final)\n")
        times = gpu_bench.step_times(log)
        self.assertAlmostEqual(times[100] - times[50], 1.0)


class MemoryWatcherTest(unittest.TestCase):
    def test_keeps_each_jobs_largest_peak(self):
        pages = [b'herd_train_device_memory_peak_bytes{job="job-a",rank="0",worker="w"} 1.5e+09\n'
                 b'herd_train_device_memory_peak_bytes_other{job="job-a"} 9e+12\n'
                 b'herd_train_steps_total{job="job-c",rank="0",worker="w"} 3\n',
                 b'herd_train_device_memory_peak_bytes{rank="0",job="job-a",worker="w"} 1000\n'
                 b'herd_train_device_memory_peak_bytes{job="job-b",rank="0",worker="w"} 2048\n']

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(pages.pop(0))

            def log_message(self, *_):
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            watcher = gpu_bench.MemoryWatcher(f"127.0.0.1:{server.server_port}")
            watcher.scrape()
            watcher.scrape()
        finally:
            server.shutdown()
            server.server_close()
        self.assertEqual(watcher.peak("job-a"), 1.5e9)  # a trainer's peak never goes down
        self.assertEqual(watcher.peak("job-b"), 2048)
        self.assertIsNone(watcher.peak("job-c"))  # scraped, without the memory metric
        self.assertTrue(watcher.saw("job-c"))
        self.assertFalse(watcher.saw("job-d"))


def cell(herd, eager, ddp, herd_peak=None, eager_peak=None):
    def runs(values, peak):
        return [{"samples_per_s": v, "peak_bytes": peak, "job": "job-x"} for v in values]
    return {"batch": 256, "steps": 500, "optimizer": "sgd", "errors": [],
            "runs": {"herd": runs(herd, None), "eager": runs(eager, eager_peak), "ddp": runs(ddp, eager_peak)}}


class FixedWatcher:
    def __init__(self, peak):
        self.value = peak

    def peak(self, job):
        return self.value

    def saw(self, job):
        return True


class SummaryTest(unittest.TestCase):
    def test_medians_ratios_and_targets_on_cuda(self):
        cells = {("mlp4096_b256", "fp32"): cell([100, 130, 120], [100, 100, 90], [80, 80, 80], eager_peak=1000)}
        [row] = gpu_bench.summarize(cells, FixedWatcher(1100), "cuda")
        self.assertEqual(row["herd_samples_per_s"], 120)
        self.assertEqual(row["herd_vs_eager"], 1.2)
        self.assertEqual(row["herd_vs_ddp"], 1.5)
        self.assertEqual(row["memory_vs_eager"], 1.1)
        self.assertTrue(row["meets_speed_target"])
        self.assertFalse(row["meets_memory_target"])  # 1.1x > 1.05x

    def test_no_targets_judged_on_cpu_or_without_a_figure(self):
        cells = {("mlp1024_b64", "fp32"): cell([200], [100], [100])}
        [row] = gpu_bench.summarize(cells, FixedWatcher(None), "cpu")
        self.assertIsNone(row["meets_speed_target"])
        [row] = gpu_bench.summarize(cells, FixedWatcher(None), "cuda")
        self.assertTrue(row["meets_speed_target"])
        self.assertIsNone(row["meets_memory_target"])  # herd's metric absent: n/a


def peer_cell(herd, peers, herd_peak=None):
    """A cell with herd's runs and {side: (samples/s, peak bytes, compile seconds)} for the PyTorch sides."""
    runs = {"herd": [{"samples_per_s": herd, "peak_bytes": herd_peak, "job": "job-x"}]}
    for side, (speed, peak, compiled) in peers.items():
        runs[side] = [{"samples_per_s": speed, "peak_bytes": peak, "compile_seconds": compiled}]
    return {"batch": 64, "steps": 500, "optimizer": "sgd", "errors": [], "runs": runs, "unavailable": {}}


class StrongPeersSummaryTest(unittest.TestCase):
    def test_targets_are_judged_against_the_best_eager_peer_and_compile_ro(self):
        cells = {("mlp4096_b256", "fp32"): peer_cell(240, {
            "eager": (100, 1000, None), "ddp": (90, 1000, None), "resident": (200, 1200, None),
            "loader": (150, 900, None), "compile": (230, 1000, 31.5), "compile_ro": (250, 1100, 40.0)})}
        [row] = gpu_bench.summarize(cells, FixedWatcher(1250), "cuda")
        self.assertEqual(row["best_eager_peer"], "resident")
        self.assertEqual(row["herd_vs_best_eager"], 1.2)
        self.assertEqual(row["herd_vs_eager"], 2.4)
        self.assertTrue(row["meets_speed_target"])
        # Memory against the peer it is compared with: 1250 / 1200, not 1250 / 1000.
        self.assertEqual(row["memory_vs_best_eager"], 1.042)
        self.assertTrue(row["meets_memory_target"])
        self.assertEqual(row["herd_vs_compile_ro"], 0.96)
        self.assertFalse(row["meets_compile_target"])
        self.assertEqual(row["compile_compile_seconds"], 31.5)
        self.assertEqual(row["compile_ro_compile_seconds"], 40.0)
        self.assertIsNone(row["meets_launch_target"])  # judged on the launch-bound shape only

    def test_launch_target_on_the_small_mlp(self):
        peers = {"eager": (100, 10, None), "resident": (120, 10, None), "loader": (110, 10, None)}
        [row] = gpu_bench.summarize({("mlp1024_b64", "fp32"): peer_cell(230, peers)}, FixedWatcher(10), "cuda")
        self.assertFalse(row["meets_launch_target"])  # 230 / 120 < 2
        [row] = gpu_bench.summarize({("mlp1024_b64", "fp32"): peer_cell(250, peers)}, FixedWatcher(10), "cuda")
        self.assertTrue(row["meets_launch_target"])
        self.assertIsNone(row["meets_compile_target"])  # no compile_ro figure: n/a, not met

    def test_an_unavailable_compile_is_reported_not_judged(self):
        c = peer_cell(100, {"eager": (100, None, None)})
        c["unavailable"]["compile_ro"] = "torch 1.13 has no torch.compile"
        [row] = gpu_bench.summarize({("mlp1024_b64", "fp32"): c}, FixedWatcher(None), "cuda")
        self.assertEqual(row["unavailable"], {"compile_ro": "torch 1.13 has no torch.compile"})
        self.assertIsNone(row["compile_ro_samples_per_s"])
        self.assertIsNone(row["meets_compile_target"])
        self.assertEqual(row["errors"], [])


class PeerProcessTest(unittest.TestCase):
    """The PyTorch peer itself on the CPU: every side trains the same steps on the same batches."""

    def test_every_side_trains_or_says_it_is_unavailable(self):
        python = "/usr/bin/python3"
        if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
            self.skipTest("no torch for /usr/bin/python3")
        log = os.path.join(tempfile.mkdtemp(), "peer.log")
        peer = gpu_bench.PeerProcess(python, "cpu", 1, log, 120)
        try:
            base = {"op": "train", "model": {"name": "mlp", "hidden": [16]},
                    "data": {"kind": "synthetic", "samples": 100, "features": 12, "classes": 4, "seed": 3},
                    "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9}, "precision": "fp32", "batch": 8,
                    "warmup": 2, "steps": 4, "log_interval": 2, "seed": 1}
            answers = {side: peer.ask(dict(base, side=side)) for side in gpu_bench.PEERS}
        finally:
            peer.stop()
        losses = set()
        for side, a in answers.items():
            if side in gpu_bench.COMPILED_PEERS and a.get("unavailable"):
                self.assertIn("compile", a["error"])
                continue
            self.assertTrue(a["ok"], (side, a))
            self.assertGreater(a["samples_per_s"], 0)
            if side in gpu_bench.COMPILED_PEERS:
                self.assertGreater(a["compile_seconds"], 0)
            losses.add(round(a["loss"], 4))
        # Same model, seed and batches on every side: the resident set and the DataLoader feed the same rows.
        self.assertEqual(len(losses), 1, answers)


class CheckSummaryTest(unittest.TestCase):
    def write(self, files):
        d = tempfile.mkdtemp()
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return d

    def summarize(self, files, device="cuda"):
        out = subprocess.run([sys.executable, SUMMARY, self.write(files), device, "42"], capture_output=True, text=True)
        return out.returncode, json.loads(out.stdout)

    def passing(self):
        gtest = {"testsuites": [{"name": "NcclCommunicatorTest", "testsuite": [
            {"name": "AllReduce", "result": "COMPLETED"},
            {"name": "MultiGpu", "result": "SKIPPED"}]}]}
        fused = {"testsuites": [{"name": "Optimizers/FusedOptimizerTest", "testsuite": [
            {"name": "MatchesLibTorchsOptimizerStepByStep/adamw", "result": "COMPLETED"}]}]}
        replay = {"testsuites": [{"name": "CudaGraphReplay", "testsuite": [
            {"name": "CapturedStepsMatchEagerStepsBitwise", "result": "COMPLETED"}]}]}
        graphed = {"testsuites": [{"name": "Optimizers/GraphedStepTest", "testsuite": [
            {"name": "CapturedRunMatchesEagerRunBitwiseStepByStep/adam", "result": "COMPLETED"}]}]}
        bench = {"complete": True, "seconds": 100, "results": [{"shape": "mlp4096_b256", "precision": "fp32",
                                                                 "herd_samples_per_s_runs": [1, 2], "errors": []}]}
        return {"nvidia-smi.txt": "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04\n",
                "nccl_smoke.json": '{"ok":true,"world":1,"device":"NVIDIA H100","nccl_version":22809,'
                                   '"checks":[{"name":"a","ok":true,"ms":3}]}\n', "nccl_smoke.rc": "0",
                "nccl_test.json": json.dumps(gtest), "nccl_test.rc": "0",
                "fused_optimizer_test.json": json.dumps(fused), "fused_optimizer_test.rc": "0",
                "cuda_graph_replay_test.json": json.dumps(replay), "cuda_graph_replay_test.rc": "0",
                "graphed_step_test.json": json.dumps(graphed), "graphed_step_test.rc": "0",
                "herd_job.json": '{"ok": true, "state": "SUCCEEDED", "loss": 0.5, "logs": "/tmp/x"}\n',
                "herd_job.rc": "0", "gpu_bench.json": json.dumps(bench), "gpu_bench.rc": "0"}

    def test_all_parts_passed(self):
        rc, s = self.summarize(self.passing())
        self.assertEqual(rc, 0, s)
        self.assertTrue(s["ok"])
        self.assertEqual(s["gpu"], "NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04")
        self.assertEqual(s["parts"]["nccl_communicator_test"]["passed"], 1)
        self.assertEqual(s["parts"]["nccl_communicator_test"]["skipped"], 1)
        self.assertEqual(s["parts"]["nccl_smoke"]["checks_ok"], 1)
        self.assertEqual(s["parts"]["fused_optimizer_test"]["passed"], 1)
        self.assertEqual(s["parts"]["gpu_bench"]["results"][0]["runs"], 2)

    def test_fused_optimizer_cases_that_all_skip_fail_a_cuda_check_not_a_cpu_dry_run(self):
        files = self.passing()
        files["fused_optimizer_test.json"] = json.dumps({"testsuites": [{"name": "Optimizers/FusedOptimizerTest",
                                                                          "testsuite": [{"name": "x", "result": "SKIPPED"}]}]})
        rc, s = self.summarize(files)
        self.assertEqual((rc, s["parts"]["fused_optimizer_test"]["status"]), (1, "skipped"))
        rc, s = self.summarize(files, device="cpu")
        self.assertEqual((rc, s["ok"]), (0, True))

    def test_a_skipped_cuda_graph_replay_fails_a_cuda_check_not_a_cpu_dry_run(self):
        files = self.passing()
        files["cuda_graph_replay_test.json"] = json.dumps({"testsuites": [{"name": "CudaGraphReplay", "testsuite": [
            {"name": "CapturedStepsMatchEagerStepsBitwise", "result": "SKIPPED"}]}]})
        rc, s = self.summarize(files)
        self.assertEqual((rc, s["parts"]["cuda_graph_replay_test"]["status"]), (1, "skipped"))
        rc, s = self.summarize(files, device="cpu")
        self.assertEqual((rc, s["ok"]), (0, True))

    def test_a_skipped_graphed_step_fails_a_cuda_check_not_a_cpu_dry_run(self):
        files = self.passing()
        files["graphed_step_test.json"] = json.dumps({"testsuites": [{"name": "Optimizers/GraphedStepTest", "testsuite": [
            {"name": "CapturedRunMatchesEagerRunBitwiseStepByStep/adam", "result": "SKIPPED"}]}]})
        rc, s = self.summarize(files)
        self.assertEqual((rc, s["parts"]["graphed_step_test"]["status"]), (1, "skipped"))
        rc, s = self.summarize(files, device="cpu")
        self.assertEqual((rc, s["ok"]), (0, True))

    def test_a_skipped_nccl_smoke_fails_a_cuda_check_not_a_cpu_dry_run(self):
        files = self.passing()
        files["nccl_smoke.json"] = '{"ok":false,"skipped":true,"reason":"herd was built without NCCL"}\n'
        files["nccl_smoke.rc"] = "2"
        rc, s = self.summarize(files)
        self.assertEqual((rc, s["ok"], s["parts"]["nccl_smoke"]["status"]), (1, False, "skipped"))
        rc, s = self.summarize(files, device="cpu")
        self.assertEqual((rc, s["ok"]), (0, True))

    def test_a_failed_gtest_case_fails(self):
        files = self.passing()
        gtest = json.loads(files["nccl_test.json"])
        gtest["testsuites"][0]["testsuite"][0]["failures"] = [{"failure": "boom"}]
        files["nccl_test.json"], files["nccl_test.rc"] = json.dumps(gtest), "1"
        rc, s = self.summarize(files)
        self.assertEqual(s["parts"]["nccl_communicator_test"]["failed_tests"], ["NcclCommunicatorTest.AllReduce"])
        self.assertEqual(rc, 1)

    def test_a_bench_cut_short_fails_but_keeps_its_figures(self):
        files = self.passing()
        bench = json.loads(files["gpu_bench.json"])
        bench["complete"] = False
        files["gpu_bench.json"], files["gpu_bench.rc"] = json.dumps(bench), "124"
        rc, s = self.summarize(files)
        part = s["parts"]["gpu_bench"]
        self.assertEqual((rc, part["status"], part["error"]), (1, "failed", "timed out; results so far"))
        self.assertEqual(part["results"][0]["shape"], "mlp4096_b256")

    def test_missing_outputs_fail_each_part(self):
        rc, s = self.summarize({"nccl_smoke.rc": "124"})
        self.assertEqual(rc, 1)
        self.assertEqual(s["parts"]["nccl_smoke"]["error"], "timed out")
        for part in s["parts"].values():
            self.assertEqual(part["status"], "failed")


if __name__ == "__main__":
    unittest.main()
