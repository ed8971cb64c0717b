// The collectives interface every trainer uses. Three transports implement
// it, each in its own target: the TCP mesh (herd's own, backend "tcp") and
// Gloo for CPU, NCCL for GPU; shared memory sums for ranks on one host in
// front of a CPU one. Trainer code sees only this.
//
// Buffers are raw pointers so this header (and the Gloo target) stays free of
// LibTorch: it compiles fast and is testable on its own. For NCCL they are
// device pointers.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace herd {

enum class DataType { kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kUInt8 };

size_t DataTypeSize(DataType type);
const char* DataTypeName(DataType type);

// ReduceScatterAsync's block for a buffer of `count` elements over `size`
// ranks: ceil(count / size), so size() blocks cover it with at most
// size - 1 elements of padding at the end.
size_t ReduceScatterBlockCount(size_t count, int size);

// Elements [begin, end) of a buffer.
struct ElementRange {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
  bool operator==(const ElementRange& o) const { return begin == o.begin && end == o.end; }
};

// Per rank, the contiguous ranges a collective gives it: ranges[r].
using RangeLayout = std::vector<std::vector<ElementRange>>;

// Rank r gets [count * r / size, count * (r + 1) / size): blocks differ by at
// most one element, none empty unless count < size.
RangeLayout NearEqualRanges(size_t count, int size);

// When one collective ran, for the averaging round timeline: issued, began
// on the communicator's thread, finished its first hop (an all-reduce's
// reduce-scatter: this rank's ranges summed) and finished; what a caller
// needs to tell time on the wire from time queued or waited. With the
// data plane's TCP window when the op began (the smallest over peers) and
// the largest smoothed round-trip time, so a burst that starts in slow
// start shows. Zero (the clock's epoch) where a backend does not know.
struct WorkTimes {
  using Time = std::chrono::steady_clock::time_point;
  Time queued;
  Time started;
  Time first_hop;
  Time finished;
  int64_t window_bytes = 0;
  double rtt_seconds = 0;
};

// Handle to an operation in flight. Collectives run in issue order on the
// communicator's own thread(s) and each carries the communicator's timeout,
// so Wait() returns within that timeout even when a peer hangs or dies.
class Work {
 public:
  virtual ~Work() = default;
  // OK, or the op's failure: DEADLINE_EXCEEDED (a peer did not answer in
  // time), UNAVAILABLE (a peer closed its connection), ABORTED (the
  // communicator was already broken by an earlier failure).
  virtual absl::Status Wait() = 0;
  // Non-blocking: has the op finished (successfully or not)?
  virtual bool Done() const = 0;
  // The op's times so far (complete once Done()); all zero where unknown.
  virtual WorkTimes times() const { return {}; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual std::string backend() const = 0;  // "tcp", "gloo", "nccl"; "+shm" after shared memory

  // Every rank must issue the same collectives in the same order.

  // In-place elementwise sum across ranks (callers divide for averages).
  // kFloat16/kBFloat16 are summed in that precision: the wire compression.
  virtual std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) = 0;
  // Copies `bytes` bytes from `root`'s buffer into every other rank's.
  virtual std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) = 0;
  // Each rank contributes `bytes` bytes; `out` receives size()*bytes, rank order.
  virtual std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) = 0;
  virtual std::shared_ptr<Work> BarrierAsync() = 0;

  // Elementwise sum across ranks, scattered in blocks. Every rank's `in`
  // holds size() blocks of `block_count` elements each (callers pad the last
  // to full length; ReduceScatterBlockCount gives the block for a buffer of
  // `count` elements); on rank r, `out` (`block_count` elements) receives the
  // sum over ranks of block r, in[r * block_count, (r + 1) * block_count).
  // `out` may be exactly in + rank() * block_count (in place); otherwise it
  // must not overlap `in`. The order of the additions per backend:
  //  - gloo: a ring; block r starts at rank r - 1 and gathers ranks r - 2,
  //    r - 3, ... around it, ending on rank r: the order Gloo's ring
  //    all-reduce gives the part of its buffer it finishes on rank r.
  //  - gloo+shm: rank order 0, 1, ..., size() - 1, as its all-reduce sums.
  //  - nccl: NCCL's.
  // Same failure rule and timeout as every other collective.
  virtual std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) = 0;

  // Which elements of a `count`-element buffer of `type` each rank's
  // ReduceScatterInPlaceAsync sums: disjoint ranges covering the buffer, the
  // same answer on every rank (a pure function of count, type and size).
  // Chosen so that each element's sum is bitwise what AllReduceAsync gives
  // for it where the backend allows:
  //  - gloo: the part of each ring (one per stripe) Gloo's ring all-reduce
  //    finishes on that rank, so both sum every element in the same order.
  //  - gloo+shm: near-equal blocks (both sum in rank order) for what takes
  //    the shared-memory path, else the inner Gloo's layout.
  //  - nccl: near-equal blocks; no bitwise promise (NCCL picks its own order).
  virtual RangeLayout ReduceScatterLayout(size_t count, DataType type) const = 0;
  // In-place sum across ranks of the elements ReduceScatterLayout(count,
  // type) gives this rank: afterwards they hold the global sums; every other
  // element of `data` is left in an unspecified state (partial sums). Each
  // rank sends and receives about (size() - 1) / size() of the buffer, half
  // an all-reduce. Same failure rule and timeout as every other collective.
  virtual std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) = 0;

  // Memory for `bytes` of float32 data that AllReduceAsync sums where it
  // lies, without staging copies (a slot of a shared-memory segment); null
  // when this communicator has none to offer, or none left. It stays mapped
  // while the returned pointer lives, even past the communicator, so tensors
  // built on it can outlive a failed generation safely.
  virtual std::shared_ptr<void> AllocateAllReduceBuffer(size_t /*bytes*/) { return nullptr; }

  // Blocking conveniences.
  absl::Status AllReduce(void* data, size_t count, DataType type) {
    return AllReduceAsync(data, count, type)->Wait();
  }
  absl::Status Broadcast(void* data, size_t bytes, int root) { return BroadcastAsync(data, bytes, root)->Wait(); }
  absl::Status AllGather(const void* in, size_t bytes, void* out) { return AllGatherAsync(in, bytes, out)->Wait(); }
  absl::Status Barrier() { return BarrierAsync()->Wait(); }
  absl::Status ReduceScatter(const void* in, void* out, size_t block_count, DataType type) {
    return ReduceScatterAsync(in, out, block_count, type)->Wait();
  }
};

// Where ranks publish and find each other's connection details during
// rendezvous: the coordinator's per-generation key-value store in production,
// an in-memory map in tests.
class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Waits up to `timeout` for the key; DEADLINE_EXCEEDED if it never appears.
  virtual absl::Status Get(const std::string& key, std::chrono::milliseconds timeout, std::string* value) = 0;
};

// OK while the store's generation is still on: reads `key`, one this
// generation has already written, without waiting. The coordinator's store
// fails every call for a generation it has ended (a member died and the next
// generation formed without it), so a rank waiting on sockets or on NCCL's
// setup learns of it here, with one small store call.
absl::Status GenerationStillOn(RendezvousStore& store, const std::string& key);

}  // namespace herd
