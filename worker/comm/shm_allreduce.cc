#include "worker/comm/shm_allreduce.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/collective_queue.h"
#include "worker/comm/float_sum.h"
#include "worker/comm/peer_fault.h"

namespace herd {
namespace {

// True once `pid` has exited. A killed process stays a zombie until its
// parent (or, when that died with it, init) reaps it, which can take a
// second or more; kill(pid, 0) succeeds on a zombie, so its state is read too.
bool ProcessEnded(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  char text[512];
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')', comm may hold any byte.
  const char* close_paren = std::strrchr(text, ')');
  if (close_paren == nullptr || close_paren[1] != ' ') return false;
  return close_paren[2] == 'Z' || close_paren[2] == 'X';
}

constexpr uint64_t kMagic = 0x68657264'73686d32;  // "herdshm2"
constexpr size_t kMaxRanks = 64;
constexpr size_t kAlign = 4096;
constexpr size_t kBufferAlign = 64;      // in-place buffers start on a cache line
constexpr size_t kChunkFloats = 2048;    // 8 KiB: a share is summed through L1 in chunks

// One cache line per rank, so ranks do not bounce each other's lines. The
// counters are 32-bit futex words (compared modulo 2^32).
struct alignas(64) RankState {
  std::atomic<uint32_t> arrived;  // op number whose input is in the slot
  std::atomic<uint32_t> summed;   // op number whose share is in every slot
  std::atomic<int32_t> pid;
  std::atomic<int32_t> abandoned;  // set when the rank's communicator goes away
  std::atomic<uint64_t> offset;    // where the op's data starts in the slot (floats)
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex words must be plain 32-bit");

bool Reached(uint32_t value, uint32_t op) { return static_cast<int32_t>(value - op) >= 0; }

uint32_t* Word(std::atomic<uint32_t>* field) { return reinterpret_cast<uint32_t*>(field); }

// Blocks (no CPU) while *field == seen, up to `wait`. Shared, not private:
// the word lives in memory shared between processes.
void FutexWait(std::atomic<uint32_t>* field, uint32_t seen, std::chrono::microseconds wait) {
  struct timespec timeout = {static_cast<time_t>(wait.count() / 1000000), static_cast<long>(wait.count() % 1000000) * 1000};
  syscall(SYS_futex, Word(field), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

void Publish(std::atomic<uint32_t>* field, uint32_t op) {
  field->store(op, std::memory_order_release);
  syscall(SYS_futex, Word(field), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

struct Header {
  uint64_t magic;
  uint64_t slot_bytes;
  uint64_t in_place_bytes;
  uint64_t size;
  RankState ranks[kMaxRanks];
};

size_t RoundUp(size_t n, size_t to = kAlign) { return (n + to - 1) / to * to; }

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

// The mapped segment; unmapped when the communicator and every buffer handed
// out from it are gone.
struct Mapping {
  void* base;
  size_t bytes;
  ~Mapping() { munmap(base, bytes); }
};

class ShmAllReduce : public Communicator {
 public:
  ShmAllReduce(const ShmAllReduceOptions& options, Communicator* inner, std::shared_ptr<Mapping> mapping)
      : options_(options),
        inner_(inner),
        mapping_(std::move(mapping)),
        header_(static_cast<Header*>(mapping_->base)),
        slot_floats_((options_.in_place_bytes + options_.slot_bytes) / sizeof(float)),
        scratch_offset_(options_.in_place_bytes / sizeof(float)),
        offsets_(options_.size) {
    header_->ranks[options_.rank].pid.store(getpid());
  }

  ~ShmAllReduce() override {
    header_->ranks[options_.rank].abandoned.store(1);
    queue_.Shutdown();
  }

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  std::string backend() const override { return inner_->backend() + "+shm"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) override {
    const size_t bytes = count * DataTypeSize(type);
    // The path depends on type and size alone, never on where the data lies,
    // so every rank takes the same one.
    if (type != DataType::kFloat32 || bytes > options_.slot_bytes) return inner_->AllReduceAsync(data, count, type);
    std::string what = absl::StrCat("shared-memory all-reduce of ", count, " float32");
    return queue_.Submit(what, [this, data, count, what](uint64_t sequence) {
      return RunAllReduce(static_cast<float*>(data), count, static_cast<uint32_t>(sequence + 1), what);
    });
  }
  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) override {
    // As for the all-reduce: the path depends on type and size alone.
    if (type != DataType::kFloat32 || block_count * options_.size * sizeof(float) > options_.slot_bytes) {
      return inner_->ReduceScatterAsync(in, out, block_count, type);
    }
    std::string what = absl::StrCat("shared-memory reduce-scatter of ", block_count, " float32 per rank");
    return queue_.Submit(what, [this, in, out, block_count, what](uint64_t sequence) {
      return RunReduceScatter(static_cast<const float*>(in), static_cast<float*>(out), block_count,
                              static_cast<uint32_t>(sequence + 1), what);
    });
  }
  RangeLayout ReduceScatterLayout(size_t count, DataType type) const override {
    // Each rank's share of the all-reduce: both sum it in rank order.
    if (type != DataType::kFloat32 || count * sizeof(float) > options_.slot_bytes) {
      return inner_->ReduceScatterLayout(count, type);
    }
    return NearEqualRanges(count, options_.size);
  }
  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) override {
    // The all-reduce's choice of path, so the layouts agree with it too.
    if (type != DataType::kFloat32 || count * sizeof(float) > options_.slot_bytes) {
      return inner_->ReduceScatterInPlaceAsync(data, count, type);
    }
    std::string what = absl::StrCat("shared-memory in-place reduce-scatter of ", count, " float32");
    return queue_.Submit(what, [this, data, count, what](uint64_t sequence) {
      auto* floats = static_cast<float*>(data);
      const size_t begin = count * options_.rank / options_.size;
      const size_t end = count * (options_.rank + 1) / options_.size;
      bool copied_in = false;
      // Writes only this rank's share of `data`, which no other rank reads.
      return Run(floats, count, static_cast<uint32_t>(sequence + 1), what,
                 [&] { SumShareInto(begin, end, floats + begin); }, &copied_in);
    });
  }
  std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) override {
    return inner_->BroadcastAsync(data, bytes, root);
  }
  std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) override {
    return inner_->AllGatherAsync(in, bytes, out);
  }
  std::shared_ptr<Work> BarrierAsync() override { return inner_->BarrierAsync(); }

  std::shared_ptr<void> AllocateAllReduceBuffer(size_t bytes) override {
    if (bytes == 0 || bytes > options_.slot_bytes) return nullptr;
    std::lock_guard<std::mutex> lock(allocate_mu_);
    const size_t start = RoundUp(next_in_place_, kBufferAlign);
    if (start + bytes > options_.in_place_bytes) return nullptr;
    next_in_place_ = start + bytes;
    // Shares ownership of the mapping: the segment outlives this communicator
    // while the buffer is in use.
    return std::shared_ptr<void>(mapping_, reinterpret_cast<char*>(Slot(options_.rank)) + start);
  }

 private:
  float* Slot(int r) const {
    return reinterpret_cast<float*>(static_cast<char*>(mapping_->base) + RoundUp(sizeof(Header)) +
                                    r * slot_floats_ * sizeof(float));
  }

  // Whether `data` is an in-place buffer of this rank's slot.
  bool InPlace(const float* data, size_t count) const {
    const auto begin = reinterpret_cast<uintptr_t>(Slot(options_.rank));
    const auto at = reinterpret_cast<uintptr_t>(data);
    return at >= begin && at + count * sizeof(float) <= begin + options_.in_place_bytes;
  }

  // Waits until every rank's `field` reached `op`.
  absl::Status WaitAll(std::atomic<uint32_t> RankState::*field, uint32_t op, const std::string& what,
                       std::chrono::steady_clock::time_point deadline) {
    auto next_liveness_check = std::chrono::steady_clock::now();
    for (int r = 0; r < options_.size; ++r) {
      RankState& peer = header_->ranks[r];
      while (true) {
        const uint32_t seen = (peer.*field).load(std::memory_order_acquire);
        if (Reached(seen, op)) break;
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) {
          return PeerLateError(r, absl::StrCat(what, ": rank ", r, " did not arrive within ", options_.timeout.count(),
                                               " ms"));
        }
        if (peer.abandoned.load() != 0) {
          return absl::UnavailableError(absl::StrCat(what, ": rank ", r, " left the collective"));
        }
        if (now >= next_liveness_check) {
          const int pid = peer.pid.load();
          if (pid > 0 && ProcessEnded(pid)) {
            return PeerClosedError(r, absl::StrCat(what, ": rank ", r, " (pid ", pid, ") exited"));
          }
          next_liveness_check = now + std::chrono::milliseconds(5);
        }
        // Sleeps in the kernel until the peer publishes (it wakes the word),
        // waking every few ms to check the deadline and the peer's health.
        FutexWait(&(peer.*field), seen, std::chrono::milliseconds(5));
      }
    }
    return absl::OkStatus();
  }

  // chunk = the sum of elements [c, c + len) of every rank's data, in rank
  // order: the one order both collectives use, so they agree to the bit.
  void SumRanks(size_t c, size_t len, float* chunk) const {
    auto at = [&](int r) { return Slot(r) + offsets_[r] + c; };
    if (options_.size == 1) {
      std::memcpy(chunk, at(0), len * sizeof(float));
      return;
    }
    SumFloat32(chunk, at(0), at(1), len);
    for (int r = 2; r < options_.size; ++r) SumFloat32(chunk, chunk, at(r), len);
  }

  // Sums elements [begin, end) of every rank's data and writes the sum into
  // every rank's data. Other ranks touch only their own shares, so nobody
  // reads what another writes during the op.
  void ReduceShare(size_t count_begin, size_t count_end) {
    const int n = options_.size;
    if (n == 1) return;  // the only slot already holds the sum
    alignas(64) float chunk[kChunkFloats];
    for (size_t c = count_begin; c < count_end; c += kChunkFloats) {
      const size_t len = std::min(kChunkFloats, count_end - c);
      SumRanks(c, len, chunk);
      for (int r = 0; r < n; ++r) std::memcpy(Slot(r) + offsets_[r] + c, chunk, len * sizeof(float));
    }
  }

  // Sums elements [begin, end) of every rank's data into `out`. Writes only
  // this rank's own share of its slot (when `out` lies there), which no other
  // rank reads.
  void SumShareInto(size_t count_begin, size_t count_end, float* out) {
    alignas(64) float chunk[kChunkFloats];
    for (size_t c = count_begin; c < count_end; c += kChunkFloats) {
      const size_t len = std::min(kChunkFloats, count_end - c);
      SumRanks(c, len, chunk);
      std::memcpy(out + (c - count_begin), chunk, len * sizeof(float));
    }
  }

  // Both collectives: every rank's `count` floats of `data` meet in the
  // slots, `reduce` sums this rank's share, and nobody leaves (or reuses its
  // slot) before every rank has summed. Returns whether `data` was copied in.
  absl::Status Run(const float* data, size_t count, uint32_t op, const std::string& what,
                   const std::function<void()>& reduce, bool* copied_in) {
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    RankState& me = header_->ranks[options_.rank];
    float* mine = Slot(options_.rank);
    const bool in_place = InPlace(data, count);
    const size_t offset = in_place ? static_cast<size_t>(data - mine) : scratch_offset_;
    if (!in_place) std::memcpy(mine + offset, data, count * sizeof(float));
    *copied_in = !in_place;
    me.offset.store(offset, std::memory_order_relaxed);  // published by the release below
    Publish(&me.arrived, op);
    if (auto s = WaitAll(&RankState::arrived, op, what, deadline); !s.ok()) return s;
    for (int r = 0; r < options_.size; ++r) {
      offsets_[r] = header_->ranks[r].offset.load(std::memory_order_relaxed);
      if (offsets_[r] + count > slot_floats_) {
        return absl::InternalError(absl::StrCat(what, ": rank ", r, " placed its data outside its slot"));
      }
    }
    reduce();
    Publish(&me.summed, op);
    return WaitAll(&RankState::summed, op, what, deadline);
  }

  absl::Status RunAllReduce(float* data, size_t count, uint32_t op, const std::string& what) {
    bool copied_in = false;
    absl::Status status = Run(data, count, op, what, [&] {
      // This rank's share, the same split on every rank.
      ReduceShare(count * options_.rank / options_.size, count * (options_.rank + 1) / options_.size);
    }, &copied_in);
    if (status.ok() && copied_in) std::memcpy(data, Slot(options_.rank) + scratch_offset_, count * sizeof(float));
    return status;
  }

  absl::Status RunReduceScatter(const float* in, float* out, size_t block_count, uint32_t op, const std::string& what) {
    bool copied_in = false;
    const size_t begin = block_count * options_.rank;
    return Run(in, block_count * options_.size, op, what,
               [&] { SumShareInto(begin, begin + block_count, out); }, &copied_in);
  }

  const ShmAllReduceOptions options_;
  Communicator* inner_;
  std::shared_ptr<Mapping> mapping_;
  Header* header_;
  const size_t slot_floats_;     // in-place area + scratch area
  const size_t scratch_offset_;  // where copied-in data goes (floats)
  std::vector<size_t> offsets_;  // the op's data in each rank's slot; the queue runs one op at a time
  std::mutex allocate_mu_;
  size_t next_in_place_ = 0;  // bytes of the in-place area handed out
  CollectiveQueue queue_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateShmAllReduce(const ShmAllReduceOptions& options,
                                                                 Communicator* inner,
                                                                 std::shared_ptr<RendezvousStore> store) {
  if (options.size < 1 || options.size > static_cast<int>(kMaxRanks) || options.rank < 0 ||
      options.rank >= options.size || options.slot_bytes == 0) {
    return absl::InvalidArgumentError("shared-memory all-reduce: bad rank, size or slot size");
  }
  ShmAllReduceOptions fixed = options;
  fixed.slot_bytes = RoundUp(options.slot_bytes);
  fixed.in_place_bytes = RoundUp(options.in_place_bytes);
  const size_t total = RoundUp(sizeof(Header)) + options.size * (fixed.in_place_bytes + fixed.slot_bytes);
  const std::string key = options.key_prefix + "shm-name";
  std::string name;
  int fd = -1;
  absl::Status status;
  if (options.rank == 0) {
    name = absl::StrCat("/herd-", getpid(), "-", std::random_device{}());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      status = absl::ResourceExhaustedError(Errno(("shm_open " + name).c_str()));
    } else if (int error = posix_fallocate(fd, 0, static_cast<off_t>(total)); error != 0) {
      status = absl::ResourceExhaustedError(
          absl::StrCat("reserving ", total, " bytes of shared memory: ", std::strerror(error)));
    }
    // Peers learn the outcome either way: "" means use the inner path.
    if (auto s = store->Set(key, status.ok() ? name : ""); !s.ok() && status.ok()) status = s;
  } else {
    status = store->Get(key, options.timeout, &name);
    if (status.ok() && name.empty()) status = absl::ResourceExhaustedError("rank 0 could not create the segment");
    if (status.ok()) {
      fd = shm_open(name.c_str(), O_RDWR, 0600);
      if (fd < 0) status = absl::ResourceExhaustedError(Errno(("shm_open " + name).c_str()));
    }
  }
  void* base = MAP_FAILED;
  if (status.ok()) {
    base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) status = absl::ResourceExhaustedError(Errno("mmap"));
  }
  if (fd >= 0) close(fd);
  if (status.ok() && options.rank == 0) {
    Header* header = static_cast<Header*>(base);
    header->slot_bytes = fixed.slot_bytes;
    header->in_place_bytes = fixed.in_place_bytes;
    header->size = options.size;
    std::atomic_thread_fence(std::memory_order_release);
    header->magic = kMagic;
  }
  // Everyone mapped (or knows it failed) before the name disappears; the
  // all-reduce agrees on the outcome, so all ranks take the same path.
  int64_t failed = status.ok() ? 0 : 1;
  absl::Status agreed = inner->AllReduce(&failed, 1, DataType::kInt64);
  if (options.rank == 0 && !name.empty()) shm_unlink(name.c_str());
  if (!agreed.ok() || failed != 0) {
    if (base != MAP_FAILED) munmap(base, total);
    if (!agreed.ok()) return agreed;
    return status.ok() ? absl::ResourceExhaustedError("a peer could not map the shared segment") : status;
  }
  std::shared_ptr<Mapping> mapping(new Mapping{base, total});  // no temporary: its destructor unmaps
  const Header* header = static_cast<const Header*>(base);
  if (header->magic != kMagic || header->slot_bytes != fixed.slot_bytes ||
      header->in_place_bytes != fixed.in_place_bytes || header->size != static_cast<uint64_t>(options.size)) {
    return absl::ResourceExhaustedError("shared segment " + name + " does not match this communicator");
  }
  return std::unique_ptr<Communicator>(new ShmAllReduce(fixed, inner, std::move(mapping)));
}

}  // namespace herd
