"""herd's resnet_small (worker/models/resnet_small.cc) in PyTorch, for
the DDP peer (gpu_peer.py).

The same layers, options and registration order: a 3x3 stem (no bias) and
its norm, three stages of two basic blocks (widths 16/32/64 by default;
stages after the first halve the resolution in their first block, whose
shortcut is a 1x1 conv and a norm), ReLU after each block, global average
pooling and a linear head. Norms are GroupNorm with 8 groups (herd's default
`model.norm: group`) or BatchNorm2d (`batch`); LibTorch's defaults for
both (eps 1e-5, affine, momentum 0.1) are PyTorch's. PyTorch's default
initialization draws from the same distributions as herd's seeded one, not
the same values. bench/gpu_bench.py checks the parameter count against the
count herd's trainer logs.
"""
import torch.nn as nn
import torch.nn.functional as F

GROUPS = 8  # herd's kGroups: divides every width


def conv(cin, cout, kernel, stride):
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)


def norm(kind, channels):
    if kind == "group":
        return nn.GroupNorm(GROUPS, channels)
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    raise ValueError(f"norm {kind!r}: expected group or batch (herd's sync_batch is not ported)")


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride, kind):
        super().__init__()
        self.conv1 = conv(cin, cout, 3, stride)
        self.norm1 = norm(kind, cout)
        self.conv2 = conv(cout, cout, 3, 1)
        self.norm2 = norm(kind, cout)
        self.shortcut_conv = self.shortcut_norm = None
        if stride != 1 or cin != cout:
            self.shortcut_conv = conv(cin, cout, 1, stride)
            self.shortcut_norm = norm(kind, cout)

    def forward(self, x):
        y = F.relu(self.norm1(self.conv1(x)))
        y = self.norm2(self.conv2(y))
        skip = self.shortcut_norm(self.shortcut_conv(x)) if self.shortcut_conv is not None else x
        return F.relu(y + skip)


class ResnetSmall(nn.Module):
    def __init__(self, in_channels=1, widths=(16, 32, 64), classes=10, kind="group"):
        super().__init__()
        for w in widths:
            if w <= 0 or w % GROUPS:
                raise ValueError(f"widths: {w} is not a positive multiple of {GROUPS}")
        self.stem_conv = conv(in_channels, widths[0], 3, 1)
        self.stem_norm = norm(kind, widths[0])
        self.blocks = []
        width = widths[0]
        for stage, out in enumerate(widths):
            for block in range(2):
                stride = 2 if stage > 0 and block == 0 else 1
                name = f"stage{stage + 1}_block{block + 1}"  # herd's module names
                self.add_module(name, BasicBlock(width, out, stride, kind))
                self.blocks.append(name)
                width = out
        self.fc = nn.Linear(width, classes)

    def forward(self, x):
        x = F.relu(self.stem_norm(self.stem_conv(x)))
        for name in self.blocks:
            x = getattr(self, name)(x)
        return self.fc(x.mean((2, 3)))
