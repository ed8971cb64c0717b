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

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

std::vector<ElementRange> GlooRingFinishedRanges(size_t count, size_t width, int size) {
  const size_t n = static_cast<size_t>(std::max(size, 1));
  std::vector<ElementRange> ranges(n, ElementRange{count, count});
  if (n == 1 || count == 0 || width == 0) {
    ranges[0] = ElementRange{0, count};
    return ranges;
  }
  // gloo/allreduce.cc, ring(), in bytes.
  const size_t total_bytes = count * width;
  const size_t max_segment_bytes = width * std::max<size_t>(1, kGlooMaxSegmentBytes / width);
  const size_t segments =
      RoundUp(std::max((total_bytes + max_segment_bytes - 1) / max_segment_bytes, 2 * n), n);
  const size_t segment_bytes = RoundUp((total_bytes + segments - 1) / segments, width);
  const size_t group = segments / n * segment_bytes / width;  // elements a rank finishes
  for (size_t c = 0; c < n; ++c) ranges[c] = ElementRange{std::min(count, c * group), std::min(count, (c + 1) * group)};
  return ranges;
}

void RingReduceScatter(gloo::Context& context, const void* in, void* out, const std::vector<ElementRange>& blocks,
                       size_t width, GlooReduceFunction reduce, uint32_t tag, std::chrono::milliseconds timeout) {
  const int size = context.size;
  const int rank = context.rank;
  const auto* input = static_cast<const uint8_t*>(in);
  auto block = [&](int index) { return input + blocks[static_cast<size_t>(index)].begin * width; };
  auto bytes_of = [&](int index) { return blocks[static_cast<size_t>(index) % size].size() * width; };
  if (static_cast<int>(blocks.size()) != size) GLOO_THROW_INVALID_OPERATION_EXCEPTION("reduce-scatter needs one block per rank");
  if (size == 1) {
    if (out != in && bytes_of(0) > 0) std::memmove(out, block(0), bytes_of(0));
    return;
  }
  size_t block_bytes = 0;  // the largest block: the scratch buffer's unit
  for (int c = 0; c < size; ++c) block_bytes = std::max(block_bytes, bytes_of(c));
  if (block_bytes == 0) return;
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
  size_t input_bytes = 0;
  for (int c = 0; c < size; ++c) input_bytes = std::max(input_bytes, (blocks[static_cast<size_t>(c)].end) * width);
  auto input_buffer = context.createUnboundBuffer(const_cast<uint8_t*>(input), input_bytes);
  auto partial = [&](int step) { return block_bytes * (1 + step % 2); };

  for (int step = 0; step < size - 1; ++step) {
    // Both ends of a message know its length: block (rank + 1 + step) is
    // what this rank sends and what rank - 1 receives at this step.
    const int sent = (rank + 1 + step) % size;
    const int summed = (rank + 2 + step) % size;  // == rank at the last step
    const size_t send_bytes = bytes_of(sent);
    const size_t recv_bytes = bytes_of(summed);
    if (recv_bytes > 0) scratch_buffer->recv(recv_from, slot, 0, recv_bytes);
    if (send_bytes > 0 && step == 0) {
      input_buffer->send(send_to, slot, static_cast<size_t>(block(sent) - input), send_bytes);
    } else if (send_bytes > 0) {
      scratch_buffer->send(send_to, slot, partial(step - 1), send_bytes);
    }
    if (recv_bytes > 0) check(scratch_buffer->waitRecv(nullptr, left()), "receive");
    if (send_bytes > 0) check((step == 0 ? input_buffer : scratch_buffer)->waitSend(nullptr, left()), "send");
    if (recv_bytes == 0) continue;
    void* target = step == size - 2 ? out : scratch.data() + partial(step);
    // Own data first, the received partial sum second, as Gloo's ring does.
    reduce(target, block(summed), scratch.data(), recv_bytes / width);
  }
}

}  // namespace herd
