#include "worker/comm/tcp_mesh_communicator.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/comm/bfloat16.h"
#include "worker/comm/collective_queue.h"
#include "worker/comm/float16.h"
#include "worker/comm/float_sum.h"
#include "worker/comm/tcp_socket.h"
#include "worker/comm/peer_exchange.h"
#include "worker/comm/pipelined_all_reduce.h"
#include "worker/comm/tcp_path.h"

namespace herd {
namespace {

// acc[i] += add[i]. Integers wrap (as unsigned), like Gloo's and NCCL's sums.
template <typename T>
void AddLoop(char* acc, const char* add, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, add + i * sizeof(T), sizeof(T));
    a = static_cast<T>(a + b);
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

void SumInto(DataType type, char* acc, const char* add, size_t count) {
  switch (type) {
    case DataType::kFloat32: SumFloat32(acc, acc, add, count); return;
    case DataType::kFloat64: AddLoop<double>(acc, add, count); return;
    case DataType::kInt64: AddLoop<uint64_t>(acc, add, count); return;
    case DataType::kUInt8: AddLoop<uint8_t>(acc, add, count); return;
    case DataType::kBFloat16: SumBFloat16(acc, acc, add, count); return;
    case DataType::kFloat16: SumFloat16(acc, acc, add, count); return;
  }
}

// An op refused before it was queued: fails without breaking the
// communicator (no rank queued it, so the ranks stay in step).
class RefusedWork : public Work {
 public:
  explicit RefusedWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }
  bool Done() const override { return true; }

 private:
  absl::Status status_;
};

// All-reduce piece size: 1 MiB measured best of 1 MiB, 4 MiB and whole buffers
// on loopback (bench/README.md).
constexpr size_t kPieceBytes = size_t{1} << 20;
// How many pieces' reduce-scatter data go out before the first all-gather.
constexpr size_t kLookaheadPieces = 4;

// One mesh's sockets (by peer rank) and the receive space of the op on it.
struct Lane {
  std::vector<UniqueFd> peers;
  // Per peer; kept between ops (the lane runs one op at a time): a fresh
  // allocation of a large buffer costs a page fault per page on every op.
  std::vector<std::vector<char>> scratch;
};

class TcpMeshCommunicator : public Communicator {
 public:
  TcpMeshCommunicator(int rank, int size, std::chrono::milliseconds timeout, std::vector<Lane> lanes)
      : rank_(rank),
        size_(size),
        timeout_(timeout),
        lanes_(std::move(lanes)),
        queue_(CollectiveQueue::Lanes(static_cast<int>(lanes_.size()))) {}
  ~TcpMeshCommunicator() override { queue_->Shutdown(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  std::string backend() const override { return "tcp"; }

  std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) override {
    return queue_->Submit("all-reduce", CollectiveQueue::TimedOp([this, data = static_cast<char*>(data), count,
                                                                  type](uint64_t sequence, WorkTimes& times) {
      Lane& lane = LaneOf(sequence);
      ReadPathInto(lane, times);
      PipelinedAllReduceArgs args;
      args.rank = rank_;
      args.size = size_;
      for (const UniqueFd& fd : lane.peers) args.peer_fds.push_back(fd.get());
      args.element_bytes = DataTypeSize(type);
      // Pieces keep what is summed in cache (it was just received); the
      // pipeline keeps them from waiting on each other's round trips.
      args.piece_elements = std::max<size_t>(1, kPieceBytes / args.element_bytes);
      args.lookahead = kLookaheadPieces;
      args.sum = [type](char* acc, const char* add, size_t n) { SumInto(type, acc, add, n); };
      args.deadline = Deadline();  // one timeout for the whole op
      return PipelinedAllReduce(data, count, args, lane.scratch, &times);
    }));
  }

  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) override {
    return queue_->Submit("reduce-scatter", [this, data = static_cast<char*>(data), count, type](uint64_t sequence) {
      return SumMyRange(LaneOf(sequence), data, NearEqualRanges(count, size_), type, Deadline());
    });
  }

  RangeLayout ReduceScatterLayout(size_t count, DataType type) const override {
    return NearEqualRanges(count, size_);
  }

  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) override {
    return queue_->Submit("reduce-scatter", [this, in = static_cast<const char*>(in), out = static_cast<char*>(out),
                                             block_count, type](uint64_t sequence) {
      const Lane& lane = LaneOf(sequence);
      const size_t block_bytes = block_count * DataTypeSize(type);
      std::vector<std::unique_ptr<char[]>> from(size_);
      std::vector<PeerTransfer> transfers;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_) continue;
        from[peer] = Scratch(block_bytes);
        transfers.push_back({peer, lane.peers[peer].get(), in + peer * block_bytes, block_bytes, from[peer].get(),
                             block_bytes});
      }
      if (absl::Status status = ExchangeWithPeers(transfers, Deadline()); !status.ok()) return status;
      // Rank 0's block is the accumulator: ours copied to scratch first when
      // we are rank 0 (`in` is const), then the sum lands in `out`.
      if (rank_ == 0) {
        from[0] = Scratch(block_bytes);
        std::memcpy(from[0].get(), in, block_bytes);
      }
      SumInRankOrder(type, block_count, [&](int r) -> const char* {
        return r == rank_ && r != 0 ? in + r * block_bytes : from[r].get();
      });
      std::memcpy(out, from[0].get(), block_bytes);  // out may be in's own block: read above
      return absl::OkStatus();
    });
  }

  std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= size_) {
      return std::make_shared<RefusedWork>(
          absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root, " outside a world of ", size_)));
    }
    return queue_->Submit("broadcast", [this, data = static_cast<char*>(data), bytes, root](uint64_t sequence) {
      const Lane& lane = LaneOf(sequence);
      std::vector<PeerTransfer> transfers;
      if (rank_ == root) {
        for (int peer = 0; peer < size_; ++peer) {
          if (peer != rank_) transfers.push_back({peer, lane.peers[peer].get(), data, bytes, nullptr, 0});
        }
      } else {
        transfers.push_back({root, lane.peers[root].get(), nullptr, 0, data, bytes});
      }
      return ExchangeWithPeers(transfers, Deadline());
    });
  }

  std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) override {
    return queue_->Submit("all-gather", CollectiveQueue::TimedOp([this, in = static_cast<const char*>(in), bytes,
                                                                  out = static_cast<char*>(out)](uint64_t sequence,
                                                                                                 WorkTimes& times) {
      const Lane& lane = LaneOf(sequence);
      ReadPathInto(lane, times);  // a gather round's one hop (round_shape.h)
      std::vector<PeerTransfer> transfers;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != rank_) transfers.push_back({peer, lane.peers[peer].get(), in, bytes, out + peer * bytes, bytes});
      }
      if (absl::Status status = ExchangeWithPeers(transfers, Deadline()); !status.ok()) return status;
      std::memmove(out + rank_ * bytes, in, bytes);
      return absl::OkStatus();
    }));
  }

  std::shared_ptr<Work> BarrierAsync() override {
    return queue_->Submit("barrier", [this](uint64_t sequence) {
      const Lane& lane = LaneOf(sequence);
      std::vector<char> tokens(size_, 1), received(size_, 0);
      std::vector<PeerTransfer> transfers;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != rank_) transfers.push_back({peer, lane.peers[peer].get(), &tokens[peer], 1, &received[peer], 1});
      }
      return ExchangeWithPeers(transfers, Deadline());
    });
  }

 private:
  std::chrono::steady_clock::time_point Deadline() const { return std::chrono::steady_clock::now() + timeout_; }

  // The lane op `sequence` runs on (CollectiveQueue::Lanes' rule).
  Lane& LaneOf(uint64_t sequence) { return lanes_[sequence % lanes_.size()]; }

  // The smallest congestion window and the largest RTT over the lane's
  // sockets as this op starts.
  static void ReadPathInto(const Lane& lane, WorkTimes& times) {
    for (const UniqueFd& fd : lane.peers) {
      if (!fd.valid()) continue;
      const TcpPath path = ReadTcpPath(fd.get());
      if (times.window_bytes == 0 || (path.window_bytes > 0 && path.window_bytes < times.window_bytes)) {
        times.window_bytes = path.window_bytes;
      }
      times.rtt_seconds = std::max(times.rtt_seconds, path.rtt_seconds);
    }
  }

  // Sums over ranks, in rank order, `count` elements whose rank-r
  // contribution is at contribution(r), into contribution(0)'s own buffer
  // (which must be writable): no buffer is allocated or copied for the sum.
  template <typename Contribution>
  void SumInRankOrder(DataType type, size_t count, Contribution contribution) const {
    char* acc = const_cast<char*>(contribution(0));
    for (int r = 1; r < size_; ++r) SumInto(type, acc, contribution(r), count);
  }

  // Receive space for one peer's bytes, not zero-filled (it is overwritten).
  static std::unique_ptr<char[]> Scratch(size_t bytes) { return std::unique_ptr<char[]>(new char[bytes]); }

  // The reduce-scatter step: each peer's copy of my range comes to me, and
  // I sum it in rank order into my range of `data`, element by element as
  // soon as every peer's copy of it is in (while the rest is on its way).
  absl::Status SumMyRange(Lane& lane, char* data, const RangeLayout& ranges, DataType type,
                          std::chrono::steady_clock::time_point deadline) {
    const size_t element = DataTypeSize(type);
    const ElementRange& mine = ranges[rank_][0];
    char* my_data = data + mine.begin * element;
    const size_t my_bytes = mine.size() * element;
    std::vector<char*> from(size_, nullptr);
    std::vector<PeerTransfer> transfers;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      const ElementRange& theirs = ranges[peer][0];
      from[peer] = ScratchFor(lane, peer, my_bytes);
      transfers.push_back({peer, lane.peers[peer].get(), data + theirs.begin * element, theirs.size() * element,
                           from[peer], my_bytes});
    }
    // Rank 0's contribution is the accumulator: on rank 0 that is my range
    // itself (summed in place), elsewhere rank 0's copy, copied back after.
    size_t summed = 0;  // elements
    auto sum_up_to = [&](size_t end) {
      if (end <= summed) return;
      const size_t offset = summed * element;
      SumInRankOrder(type, end - summed,
                     [&](int r) -> const char* { return (r == rank_ ? my_data : from[r]) + offset; });
      summed = end;
    };
    absl::Status status = ExchangeWithPeers(transfers, deadline, [&](const std::vector<size_t>& received) {
      size_t in = my_bytes;
      for (size_t i = 0; i < transfers.size(); ++i) in = std::min(in, received[i]);
      sum_up_to(in / element);
    });
    if (!status.ok()) return status;
    sum_up_to(mine.size());
    if (rank_ != 0) std::memcpy(my_data, from[0], my_bytes);
    return absl::OkStatus();
  }

  // Receive space for `peer`'s bytes on `lane` (see Lane).
  char* ScratchFor(Lane& lane, int peer, size_t bytes) {
    if (lane.scratch.empty()) lane.scratch.resize(size_);
    std::vector<char>& buffer = lane.scratch[peer];
    if (buffer.size() < bytes) buffer.resize(bytes);
    return buffer.data();
  }

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  std::vector<Lane> lanes_;
  // After lanes_: destroyed (and stopped) before their sockets close.
  std::unique_ptr<CollectiveQueue> queue_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateTcpMeshCommunicator(RendezvousStore& store,
                                                                        const TcpMeshOptions& options,
                                                                        TcpMeshSetup* setup) {
  if (options.timeout <= std::chrono::milliseconds::zero()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp communicator: timeout ", options.timeout.count(), " ms must be positive"));
  }
  if (options.lanes < 1 || options.lanes > kMaxTcpMeshLanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp communicator: lanes ", options.lanes, " outside 1..", kMaxTcpMeshLanes));
  }
  // Every lane's mesh forms at once (each with its own member key and
  // listener), so lanes cost one formation's round trips, not one each.
  std::vector<absl::StatusOr<std::vector<UniqueFd>>> formed(options.lanes);
  {
    std::vector<std::thread> threads;
    for (int lane = 1; lane < options.lanes; ++lane) {
      threads.emplace_back([&, lane] {
        TcpMeshFormationOptions mesh = options.mesh;
        mesh.key_prefix = absl::StrCat(options.mesh.key_prefix, "lane", lane, "/");
        formed[lane] = FormTcpMesh(store, mesh);
      });
    }
    formed[0] = FormTcpMesh(store, options.mesh);
    for (std::thread& thread : threads) thread.join();
  }
  std::vector<Lane> lanes(options.lanes);
  for (int lane = 0; lane < options.lanes; ++lane) {
    if (!formed[lane].ok()) {
      if (lane == 0) return formed[lane].status();
      return absl::Status(formed[lane].status().code(),
                          absl::StrCat("lane ", lane, " of ", options.lanes, ": ", formed[lane].status().message()));
    }
    lanes[lane].peers = std::move(*formed[lane]);
    for (const UniqueFd& fd : lanes[lane].peers) {
      if (!fd.valid()) continue;
      if (absl::Status status = SetNonBlocking(fd.get(), true); !status.ok()) return status;
      // Small ops (barriers, hashes, the last piece of a range) go out at
      // once. Buffer sizes stay with the kernel's autotuning: fixing
      // SO_SNDBUF/SO_RCVBUF turns it off and measured no faster on loopback.
      SetNoDelay(fd.get());
      std::string note;
      const std::string in_use = UseCongestionControl(fd.get(), options.congestion_control, &note);
      if (setup != nullptr) {
        setup->congestion_control = in_use;
        if (!note.empty()) setup->note = note;
      }
    }
  }
  return std::unique_ptr<Communicator>(new TcpMeshCommunicator(options.mesh.rank, options.mesh.world_size,
                                                               options.timeout, std::move(lanes)));
}

}  // namespace herd
