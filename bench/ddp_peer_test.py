#!/usr/bin/python3
"""The DDP peer (bench/herdbench/ddp_peer.py): its models are herd's by name (parameter names and
counts), a bad model name is an error naming the choices, the timed loop reads the loss where herd
does and times only the timed steps, and bench/ddp_peer.py trains two local ranks end to end.

Run: bazel test //bench:ddp_peer_test, or python3 bench/ddp_peer_test.py
"""
import json
import math
import os
import subprocess
import sys
import unittest

import torch

from herdbench import models
from herdbench.cluster import FASHION_MNIST, free_port
from herdbench.ddp_peer import timed_loop

HERE = os.path.dirname(os.path.abspath(__file__))


def count(model):
    return sum(p.numel() for p in model.parameters())


class ModelsTest(unittest.TestCase):
    def test_herds_names_build_herds_models(self):
        # worker/models/models_test.cc, MlpAndCnnMatchTheDdpBaseline.
        mlp = models.build(models.parse("mlp"))
        self.assertEqual(count(mlp), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10)
        names = [name for name, _ in mlp.named_parameters()]
        self.assertEqual((names[0], names[-1]), ("net.1.weight", "net.5.bias"))
        cnn = models.build(models.parse("mnist_cnn"))
        self.assertEqual(count(cnn), 32 * 9 + 32 + 64 * 32 * 9 + 64 + 9216 * 128 + 128 + 128 * 10 + 10)
        self.assertEqual(next(cnn.named_parameters())[0], "c1.weight")
        sized = models.build(models.parse("mlp:64x32"))
        self.assertEqual(count(sized), 784 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10)

    def test_a_seeded_build_is_the_same_every_time(self):
        torch.manual_seed(0)
        a = models.build(models.parse("mnist_cnn"))
        torch.manual_seed(0)
        b = models.build(models.parse("mnist_cnn"))
        for x, y in zip(a.parameters(), b.parameters()):
            self.assertTrue(torch.equal(x, y))

    def test_bad_names_say_what_is_expected(self):
        for bad in ("cnn", "mlp:", "mlp:0x4", "mlp:4xq", "torchscript:", "char_transformer:2"):
            with self.assertRaises(ValueError) as e:
                models.parse(bad)
            self.assertIn(repr(bad), str(e.exception))
            self.assertIn("mlp", str(e.exception))


class TimedLoopTest(unittest.TestCase):
    def test_reads_the_loss_where_herd_does_and_times_only_the_timed_steps(self):
        calls = []

        def step(i):
            calls.append(("step", i))
            return torch.tensor(float(i))

        run = timed_loop(step, 2, 6, lambda: calls.append(("sync",)), loss_every=4)
        self.assertEqual(calls, [("step", 0), ("step", 1), ("sync",)] + [("step", i) for i in range(2, 8)]
                         + [("sync",)])
        self.assertEqual(run["loss"], 5.0)  # read at the 4th timed step (step 5), not the 6th
        self.assertLessEqual(run["timed_unix"][0], run["timed_unix"][1])
        self.assertGreaterEqual(run["seconds"], 0)

    def test_without_loss_every_the_last_steps_loss(self):
        run = timed_loop(lambda i: torch.tensor(float(i)), 1, 3, lambda: None)
        self.assertEqual(run["loss"], 3.0)


class LocalRanksTest(unittest.TestCase):
    def test_two_ranks_train_and_report(self):
        if not os.path.exists(os.path.join(FASHION_MNIST, "train-images-idx3-ubyte.gz")):
            self.skipTest(f"no Fashion-MNIST at {FASHION_MNIST} (apt-get install dataset-fashion-mnist)")
        out = subprocess.run([sys.executable, os.path.join(HERE, "ddp_peer.py"), "--model", "mlp:16", "--world", "2",
                              "--steps", "3", "--warmup", "1", "--batch", "8", "--port", str(free_port())],
                             capture_output=True, text=True, timeout=240)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        result = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual((result["model"], result["world"], result["steps"], result["batch"]), ("mlp:16", 2, 3, 8))
        self.assertGreater(result["samples_per_s"], 0)
        self.assertTrue(math.isfinite(result["loss"]))
        self.assertEqual(result["parameters"], 784 * 16 + 16 + 16 * 10 + 10)
        self.assertLess(result["timed_unix"][0], result["timed_unix"][1])

    def test_a_bad_model_fails_before_any_rank_starts(self):
        out = subprocess.run([sys.executable, os.path.join(HERE, "ddp_peer.py"), "--model", "cnn"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 2)
        self.assertIn("--model 'cnn': expected one of mnist_cnn", out.stderr)


if __name__ == "__main__":
    unittest.main()
