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

namespace herd {

using GlooReduceFunction = void (*)(void* out, const void* a, const void* b, size_t count);

// Throws what Gloo throws (gloo::IoException on a timeout or a closed
// connection). Every wait is bounded by what is left of `timeout`, counted
// from the call. `out` may be in + rank * block_count * width.
void RingReduceScatter(gloo::Context& context, const void* in, void* out, size_t block_count, size_t width,
                       GlooReduceFunction reduce, uint32_t tag, std::chrono::milliseconds timeout);

}  // namespace herd
