#!/usr/bin/python3
"""The DDP peer's char_transformer matches herd's: the model's parameters
(names, shapes, count), the sampler's order (the values sampler_test.cc
pins), the rank shares of a short last step, the text windows and the loss.

Run: bazel test //bench:ddp_char_transformer_test, or python3 bench/ddp_char_transformer_test.py
"""
import tempfile
import unittest

import torch

from herdbench import char_transformer as ct
from herdbench.sampler import epoch_permutation, step_slice


class ModelTest(unittest.TestCase):
    def test_parameters_are_herds(self):
        model = ct.CharTransformer()
        shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
        # worker/models/char_transformer.cc's modules with its defaults (width 128, 4 heads, 2 blocks,
        # vocabulary 256, context 64), in its registration order.
        expected = {"token_embedding.weight": (256, 128), "position_embedding.weight": (64, 128)}
        for b in ("block1", "block2"):
            expected.update({f"{b}.norm1.weight": (128,), f"{b}.norm1.bias": (128,),
                             f"{b}.attention.qkv.weight": (384, 128), f"{b}.attention.qkv.bias": (384,),
                             f"{b}.attention.proj.weight": (128, 128), f"{b}.attention.proj.bias": (128,),
                             f"{b}.norm2.weight": (128,), f"{b}.norm2.bias": (128,),
                             f"{b}.fc1.weight": (512, 128), f"{b}.fc1.bias": (512,),
                             f"{b}.fc2.weight": (128, 512), f"{b}.fc2.bias": (128,)})
        expected.update({"final_norm.weight": (128,), "final_norm.bias": (128,),
                         "head.weight": (256, 128), "head.bias": (256,)})
        self.assertEqual(list(shapes.items()), list(expected.items()))
        self.assertEqual(sum(p.numel() for p in model.parameters()), ct.HERD_PARAMETERS)

    def test_causal(self):
        # A later token must not change an earlier position's logits.
        torch.manual_seed(0)
        model = ct.CharTransformer().eval()
        x = torch.randint(0, 256, (2, 64))
        y = x.clone()
        y[:, 40:] = (y[:, 40:] + 1) % 256
        with torch.no_grad():
            a, b = model(x), model(y)
        self.assertTrue(torch.equal(a[:, :40], b[:, :40]))
        self.assertFalse(torch.equal(a[:, 40:], b[:, 40:]))

    def test_loss_is_the_mean_over_positions_and_zero_for_no_rows(self):
        logits, targets = torch.randn(3, 5, 256), torch.randint(0, 256, (3, 5))
        expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        self.assertAlmostEqual(float(ct.mean_cross_entropy(logits, targets)), float(expected), places=5)
        self.assertEqual(float(ct.mean_cross_entropy(torch.zeros(0, 5, 256), torch.zeros(0, 5).long())), 0.0)


class DataTest(unittest.TestCase):
    def test_splits_and_windows(self):
        with tempfile.NamedTemporaryFile() as f:
            f.write(bytes(range(200)))
            f.flush()
            train, held_out = ct.load_split(f.name, True, 8), ct.load_split(f.name, False, 8)
        self.assertEqual(train.tolist(), list(range(180)))  # the first 90%
        self.assertEqual(held_out.tolist(), list(range(180, 200)))
        self.assertEqual(ct.window_count(train, 8), 22)  # (180 - 1) // 8
        x, y = ct.windows(train, [2, 0], 8)
        self.assertEqual(x.tolist(), [list(range(16, 24)), list(range(0, 8))])
        self.assertEqual(y.tolist(), [list(range(17, 25)), list(range(1, 9))])  # the next byte


class SamplerTest(unittest.TestCase):
    def test_pinned_values_of_herds_sampler(self):
        # worker/train/sampler_test.cc, PinnedValuesCatchAccidentalChanges.
        self.assertEqual(epoch_permutation(10, 1234, 5), [5, 3, 7, 8, 0, 1, 4, 2, 6, 9])
        large = epoch_permutation(1000000, 1, 0)
        self.assertEqual((large[0], large[999999]), (165390, 975509))

    def test_short_last_step_shares(self):
        perm = list(range(100, 110))
        self.assertEqual(step_slice(perm, 0, 3, 0, 2), ([100, 101], 6))
        self.assertEqual(step_slice(perm, 6, 3, 0, 2), ([106, 107], 4))  # 4 left: shares of 2
        self.assertEqual(step_slice(perm, 6, 3, 1, 2), ([108, 109], 4))
        self.assertEqual(step_slice(perm, 6, 3, 2, 2), ([], 4))

    def test_ranks_join_to_one_big_batch(self):
        perm = epoch_permutation(61, 5, 2)
        for position in range(0, 61, 12):
            joined = []
            for rank in range(3):
                part, count = step_slice(perm, position, 3, rank, 4)
                joined += part
            self.assertEqual(joined, step_slice(perm, position, 1, 0, 12)[0])


if __name__ == "__main__":
    unittest.main()
