"""herd's sampler (worker/train/sampler.cc) in Python, so a PyTorch peer trains
on exactly the samples herd's ranks do: one permutation per epoch, a pure
function of (seed, epoch) (Fisher-Yates driven by xoshiro256** seeded
through splitmix64), and a step takes the next world * batch indices of it,
split into contiguous per-rank shares (the epoch's last step may be short).
"""
MASK = (1 << 64) - 1


def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def _rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


class _Xoshiro256:
    def __init__(self, seed):
        self.s = []
        for _ in range(4):
            seed, word = _splitmix64(seed)
            self.s.append(word)

    def next(self):
        s = self.s
        result = (_rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def below(self, bound):
        threshold = ((1 << 64) - bound) % bound  # 2^64 mod bound
        while True:
            r = self.next()
            if r >= threshold:
                return r % bound


def epoch_permutation(n, seed, epoch):
    state, a = _splitmix64(seed & MASK)
    _, mixed = _splitmix64(a ^ (epoch & MASK))
    rng = _Xoshiro256(mixed)
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.below(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def step_slice(permutation, position, world, rank, batch):
    """(this rank's indices, the samples the whole step consumes), as EpochSampler::Slice."""
    step = min(world * batch, max(len(permutation) - position, 0))
    share = (step + world - 1) // world
    begin = position + min(rank * share, step)
    end = min(begin + share, position + step)
    return permutation[begin:end] if begin < end else [], step
