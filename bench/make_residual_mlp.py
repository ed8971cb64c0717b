#!/usr/bin/python3
"""Writes a TorchScript file for bench/compare_ddp.py's `torchscript` case: a
residual MLP (784 -> 2048 -> 2048 (+skip) -> 10) whose forward(x) returns
logits, as a user would save one. Run with Debian's python3 (python3-torch).

Usage: make_residual_mlp.py OUT.pt
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(784, 2048)
        self.mid = nn.Linear(2048, 2048)
        self.out = nn.Linear(2048, 10)

    def forward(self, x):
        h = F.relu(self.inp(x.flatten(1)))
        return self.out(h + F.relu(self.mid(h)))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.jit.script(ResidualMLP()).save(sys.argv[1])
