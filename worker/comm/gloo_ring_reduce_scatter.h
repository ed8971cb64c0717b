// The ring reduce-scatter behind GlooCommunicator::ReduceScatterAsync, over
// Gloo's point-to-point buffers (Debian's Gloo has no reduce-scatter with a
// timeout of its own).
//
// Rank r sends to r - 1 and receives from r + 1, as Gloo's ring all-reduce
// does. In step s (0 <= s < size - 1) rank r sends block r + 1 + s (its own
// data at s = 0, else the partial sum it made in step s - 1) and receives
// block r + 2 + s, to which it adds its own data; the last step completes
// block r. So block c is summed x[c-1], then + x[c-2], ..., then + x[c], the
// order Gloo's ring all-reduce uses on the part it finishes on rank c. Each
// rank sends and receives (size - 1) blocks: half an all-reduce's traffic.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/comm/communicator.h"

namespace herd {

using GlooReduceFunction = void (*)(void* out, const void* a, const void* b, size_t count);

// The segment size herd gives Gloo's ring all-reduce (Gloo's default); the
// layout below depends on it.
constexpr size_t kGlooMaxSegmentBytes = 1024 * 1024;

// Which elements of a `count`-element buffer of `width`-byte elements Gloo's
// ring all-reduce (gloo/allreduce.cc, ring()) finishes on each of `size`
// ranks: it cuts the buffer into numSegments segments (a multiple of size,
// at least 2 * size, none larger than kGlooMaxSegmentBytes) and rank c
// finishes the c-th group of numSegments / size consecutive segments; the
// last groups may be short or empty. Pure.
std::vector<ElementRange> GlooRingFinishedRanges(size_t count, size_t width, int size);

// Throws what Gloo throws (gloo::IoException on a timeout or a closed
// connection). Every wait is bounded by what is left of `timeout`, counted
// from the call. Block c is elements blocks[c] of `in` (blocks.size() ==
// context.size; blocks may differ in length, be empty, and need not be in
// order); rank r's sum of block r goes to `out`, which may be exactly
// in + blocks[rank].begin * width (in place), else must not overlap `in`.
void RingReduceScatter(gloo::Context& context, const void* in, void* out, const std::vector<ElementRange>& blocks,
                       size_t width, GlooReduceFunction reduce, uint32_t tag, std::chrono::milliseconds timeout);

}  // namespace herd
