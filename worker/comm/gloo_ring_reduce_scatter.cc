#include "worker/comm/gloo_ring_reduce_scatter.h"

#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace herd {
namespace {

// Gloo's own collectives use slot prefixes 0x01..0x08; a prefix of its own
// keeps the ring's messages apart from theirs.
constexpr uint8_t kReduceScatterSlotPrefix = 0x48;

}  // namespace

void RingReduceScatter(gloo::Context& context, const void* in, void* out, size_t block_count, size_t width,
                       GlooReduceFunction reduce, uint32_t tag, std::chrono::milliseconds timeout) {
  const int size = context.size;
  const int rank = context.rank;
  const size_t block_bytes = block_count * width;
  const auto* input = static_cast<const uint8_t*>(in);
  auto block = [&](int index) { return input + static_cast<size_t>(index) * block_bytes; };
  if (block_bytes == 0) return;
  if (size == 1) {
    if (out != in) std::memmove(out, in, block_bytes);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    const auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return std::max(remaining, std::chrono::milliseconds(1));
  };
  auto check = [&](bool completed, const char* what) {
    if (!completed) GLOO_THROW_IO_EXCEPTION("reduce-scatter ", what, " was aborted");
  };
  const int send_to = (rank + size - 1) % size;
  const int recv_from = (rank + 1) % size;
  const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);

  // [received block | partial sum A | partial sum B]: a step sends the sum
  // the previous step made while it makes the next one in the other half.
  std::vector<uint8_t> scratch(3 * block_bytes);
  auto scratch_buffer = context.createUnboundBuffer(scratch.data(), scratch.size());
  // Gloo sends from non-const memory but never writes it.
  auto input_buffer = context.createUnboundBuffer(const_cast<uint8_t*>(input), size * block_bytes);
  auto partial = [&](int step) { return block_bytes * (1 + step % 2); };

  for (int step = 0; step < size - 1; ++step) {
    scratch_buffer->recv(recv_from, slot, 0, block_bytes);
    if (step == 0) {
      input_buffer->send(send_to, slot, static_cast<size_t>((rank + 1) % size) * block_bytes, block_bytes);
    } else {
      scratch_buffer->send(send_to, slot, partial(step - 1), block_bytes);
    }
    check(scratch_buffer->waitRecv(nullptr, left()), "receive");
    check((step == 0 ? input_buffer : scratch_buffer)->waitSend(nullptr, left()), "send");
    const int summed = (rank + 2 + step) % size;  // == rank at the last step
    void* target = step == size - 2 ? out : scratch.data() + partial(step);
    // Own data first, the received partial sum second, as Gloo's ring does.
    reduce(target, block(summed), scratch.data(), block_count);
  }
}

}  // namespace herd
