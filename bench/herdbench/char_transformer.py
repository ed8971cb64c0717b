"""herd's char_transformer and text data in PyTorch, for the DDP peer
(ddp_peer.py, gpu_peer.py).

The same model as worker/models/char_transformer.cc with its defaults: a
decoder-only transformer over bytes (vocabulary 256), token + learned
position embeddings (context 64), 2 pre-LayerNorm blocks of causal 4-head
self-attention (width 128) and a 4x GELU MLP, a final LayerNorm and a linear
head; module names and parameter order as herd registers them. PyTorch's
default initialization draws from the same distributions herd's seeded one
does (worker/models/deterministic_init.cc), not the same values.

The data as worker/data/text_dataset.cc reads it: the file's first 90% of
bytes train, the rest evaluate; window i holds bytes [i*T, i*T + T], the
first T the input, the last T the next-byte targets. The loss is the mean
cross entropy over every position (worker/models/module_model.cc).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCABULARY = 256  # every byte value is a token
CONTEXT = 64  # dataset.sequence_length's default
WIDTH, HEADS, LAYERS = 128, 4, 2
# What herd's trainer logs for these defaults ("char_transformer with 470784
# parameters", worker-*/jobs/*/trainer.log): 2 x 198,272 per block, 256 for
# the final norm, 257 x 256 for the token embedding and head, 64 x 128 for the
# positions. bench/wan_bench.py also checks it against the trainer's log.
HERD_PARAMETERS = 470784


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.width, self.heads = width, heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x, future):
        n, t, _ = x.shape
        head_width = self.width // self.heads
        qkv = self.qkv(x).view(n, t, 3, self.heads, head_width).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q.matmul(k.transpose(-2, -1)) / math.sqrt(head_width)
        scores = scores.masked_fill(future, float("-inf"))
        mixed = scores.softmax(-1).matmul(v)  # [N, H, T, head_width]
        return self.proj(mixed.transpose(1, 2).reshape(n, t, self.width))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x, future):
        x = x + self.attention(self.norm1(x), future)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class CharTransformer(nn.Module):
    def __init__(self, vocabulary=VOCABULARY, context=CONTEXT, width=WIDTH, heads=HEADS, layers=LAYERS):
        super().__init__()
        self.context = context
        self.token_embedding = nn.Embedding(vocabulary, width)
        self.position_embedding = nn.Embedding(context, width)
        # herd registers the blocks as block1, block2, ...
        for i in range(layers):
            self.add_module(f"block{i + 1}", Block(width, heads))
        self.layers = layers
        self.final_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary)

    def forward(self, tokens):
        t = tokens.shape[1]
        assert t <= self.context, f"sequence of {t} tokens exceeds the context of {self.context}"
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(t, device=tokens.device))
        future = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        for i in range(self.layers):
            x = getattr(self, f"block{i + 1}")(x, future)
        return self.head(self.final_norm(x))


def mean_cross_entropy(logits, targets):
    """herd's MeanCrossEntropy: the mean over every position; 0 for no rows."""
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
    return total / max(targets.numel(), 1)


def load_split(path, train, sequence_length=CONTEXT):
    """The train split (first 90% of the file's bytes) or the eval split (the rest), as uint8."""
    with open(path, "rb") as f:
        text = f.read()
    cut = len(text) * 9 // 10
    data = text[:cut] if train else text[cut:]
    if len(data) < sequence_length + 1:
        raise ValueError(f"{path}: its {'train' if train else 'eval'} split has {len(data)} bytes, "
                         f"needs at least {sequence_length + 1}")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def window_count(data, sequence_length=CONTEXT):
    return (len(data) - 1) // sequence_length


def windows(data, indices, sequence_length=CONTEXT):
    """(inputs, targets), int64 [len(indices), T]: window i is bytes [i*T, i*T + T]."""
    starts = torch.as_tensor(indices, dtype=torch.int64).mul(sequence_length)
    positions = (starts.unsqueeze(1) + torch.arange(sequence_length + 1)).reshape(-1)
    w = data.index_select(0, positions).view(len(indices), sequence_length + 1).long()
    return w[:, :sequence_length].contiguous(), w[:, 1:].contiguous()


@torch.no_grad()
def evaluate(model, data, max_samples, batch=64):
    """herd's evaluation (worker/train/evaluator.cc) on one process: the first
    min(max_samples, windows) eval windows; loss per window averaged, token accuracy."""
    total = window_count(data) if max_samples <= 0 else min(max_samples, window_count(data))
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for start in range(0, total, batch):
        x, y = windows(data, list(range(start, min(start + batch, total))))
        logits = model(x)
        loss_sum += float(mean_cross_entropy(logits, y)) * len(x)
        correct += int(logits.argmax(-1).eq(y).sum())
        count += y.numel()
    model.train()
    return {"loss": loss_sum / total, "accuracy": correct / count}
