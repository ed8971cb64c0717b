// The TCP mesh communicator with every rank a thread, over real
// member-authenticated sockets on 127.0.0.1.
#include "worker/comm/tcp_mesh_communicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "worker/comm/bfloat16.h"
#include "worker/comm/float16.h"
#include "worker/comm/in_memory_store.h"

namespace herd {
namespace {

using std::chrono::milliseconds;

TcpMeshOptions Options(int rank, int world, milliseconds timeout = milliseconds(20000), int lanes = kDefaultTcpMeshLanes) {
  TcpMeshOptions options;
  options.lanes = lanes;
  options.mesh.key_prefix = "job/5/";
  options.mesh.generation = 5;
  options.mesh.rank = rank;
  options.mesh.world_size = world;
  options.mesh.listen_host = "127.0.0.1";
  options.mesh.advertise_host = "127.0.0.1";
  options.mesh.timeout = milliseconds(20000);
  options.timeout = timeout;
  return options;
}

// Creates `world` communicators, one per thread, and runs `body` on each.
void RunRanks(int world, const std::function<void(Communicator&)>& body, int lanes = kDefaultTcpMeshLanes) {
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = CreateTcpMeshCommunicator(store, Options(rank, world, milliseconds(20000), lanes));
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->backend(), "tcp");
      body(**comm);
    });
  }
  for (auto& t : threads) t.join();
}

// Rank r's input: reproducible, different per rank, of `bytes` bytes that
// are valid values of `type` (finite floats).
std::vector<char> Input(DataType type, size_t count, int rank) {
  std::mt19937 random(1000 + rank);
  std::uniform_real_distribution<double> real(-100.0, 100.0);
  std::vector<char> out(count * DataTypeSize(type));
  for (size_t i = 0; i < count; ++i) {
    char* at = out.data() + i * DataTypeSize(type);
    switch (type) {
      case DataType::kFloat32: {
        const float v = static_cast<float>(real(random));
        std::memcpy(at, &v, sizeof(v));
        break;
      }
      case DataType::kFloat64: {
        const double v = real(random);
        std::memcpy(at, &v, sizeof(v));
        break;
      }
      case DataType::kInt64: {
        const int64_t v = static_cast<int64_t>(random()) * (rank % 2 == 0 ? 1 : -1) * 4096;
        std::memcpy(at, &v, sizeof(v));
        break;
      }
      case DataType::kUInt8: {
        const uint8_t v = static_cast<uint8_t>(random());  // sums wrap
        std::memcpy(at, &v, sizeof(v));
        break;
      }
      case DataType::kBFloat16: {
        const uint16_t v = FloatToBFloat16(static_cast<float>(real(random)));
        std::memcpy(at, &v, sizeof(v));
        break;
      }
      case DataType::kFloat16: {
        const uint16_t v = FloatToFloat16(static_cast<float>(real(random)));
        std::memcpy(at, &v, sizeof(v));
        break;
      }
    }
  }
  return out;
}

// Element i of the sum over ranks, added in rank order with scalar code.
std::vector<char> RankOrderSum(DataType type, size_t count, int world) {
  std::vector<char> sum = Input(type, count, 0);
  for (int rank = 1; rank < world; ++rank) {
    const std::vector<char> add = Input(type, count, rank);
    for (size_t i = 0; i < count; ++i) {
      char* a = sum.data() + i * DataTypeSize(type);
      const char* b = add.data() + i * DataTypeSize(type);
      switch (type) {
        case DataType::kFloat32: {
          float x, y;
          std::memcpy(&x, a, 4);
          std::memcpy(&y, b, 4);
          x = x + y;
          std::memcpy(a, &x, 4);
          break;
        }
        case DataType::kFloat64: {
          double x, y;
          std::memcpy(&x, a, 8);
          std::memcpy(&y, b, 8);
          x = x + y;
          std::memcpy(a, &x, 8);
          break;
        }
        case DataType::kInt64: {
          uint64_t x, y;
          std::memcpy(&x, a, 8);
          std::memcpy(&y, b, 8);
          x = x + y;
          std::memcpy(a, &x, 8);
          break;
        }
        case DataType::kUInt8:
          *a = static_cast<char>(static_cast<uint8_t>(*a) + static_cast<uint8_t>(*b));
          break;
        case DataType::kBFloat16: {
          uint16_t x, y;
          std::memcpy(&x, a, 2);
          std::memcpy(&y, b, 2);
          x = FloatToBFloat16(BFloat16ToFloat(x) + BFloat16ToFloat(y));
          std::memcpy(a, &x, 2);
          break;
        }
        case DataType::kFloat16: {
          uint16_t x, y;
          std::memcpy(&x, a, 2);
          std::memcpy(&y, b, 2);
          x = FloatToFloat16(Float16ToFloat(x) + Float16ToFloat(y));
          std::memcpy(a, &x, 2);
          break;
        }
      }
    }
  }
  return sum;
}

const DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt64, DataType::kUInt8,
                           DataType::kBFloat16, DataType::kFloat16};

TEST(TcpMeshCommunicator, AllReduceIsTheRankOrderSumOnEveryRankBitwise) {
  // 300001 elements: several 1 MiB pieces for the wider types.
  constexpr int kWorld = 3;
  RunRanks(kWorld, [&](Communicator& comm) {
    for (DataType type : kTypes) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{300001}}) {
        std::vector<char> data = Input(type, count, comm.rank());
        ASSERT_TRUE(comm.AllReduce(data.data(), count, type).ok()) << DataTypeName(type) << " " << count;
        EXPECT_EQ(data, RankOrderSum(type, count, kWorld)) << DataTypeName(type) << " " << count;
      }
    }
  });
}

TEST(TcpMeshCommunicator, LargeBuffersDoNotDeadlock) {
  // Far beyond the sockets' buffers: every rank sends to all before it
  // has received anything.
  constexpr int kWorld = 3;
  constexpr size_t kCount = 3 << 20;  // 12 MiB of float32 per rank
  RunRanks(kWorld, [&](Communicator& comm) {
    std::vector<float> data(kCount, static_cast<float>(comm.rank() + 1));
    ASSERT_TRUE(comm.AllReduce(data.data(), kCount, DataType::kFloat32).ok());
    EXPECT_EQ(data.front(), 6.0f);
    EXPECT_EQ(data.back(), 6.0f);
    EXPECT_EQ(std::count(data.begin(), data.end(), 6.0f), static_cast<long>(kCount));
  });
}

TEST(TcpMeshCommunicator, ReduceScatterBroadcastAllGatherBarrier) {
  constexpr int kWorld = 3;
  RunRanks(kWorld, [&](Communicator& comm) {
    const int rank = comm.rank();
    // In-place reduce-scatter: this rank's layout range holds the sums.
    const size_t count = 11;
    std::vector<char> data = Input(DataType::kFloat32, count, rank);
    const std::vector<char> sum = RankOrderSum(DataType::kFloat32, count, kWorld);
    ASSERT_TRUE(comm.ReduceScatterInPlaceAsync(data.data(), count, DataType::kFloat32)->Wait().ok());
    const RangeLayout layout = comm.ReduceScatterLayout(count, DataType::kFloat32);
    EXPECT_EQ(layout, NearEqualRanges(count, kWorld));
    const ElementRange mine = layout[rank][0];
    EXPECT_EQ(std::memcmp(data.data() + mine.begin * 4, sum.data() + mine.begin * 4, mine.size() * 4), 0);

    // Block reduce-scatter, `out` being this rank's own block of `in`.
    const size_t block = 4;
    std::vector<char> in = Input(DataType::kFloat64, block * kWorld, rank);
    const std::vector<char> block_sum = RankOrderSum(DataType::kFloat64, block * kWorld, kWorld);
    char* own_block = in.data() + rank * block * 8;
    ASSERT_TRUE(comm.ReduceScatter(in.data(), own_block, block, DataType::kFloat64).ok());
    EXPECT_EQ(std::memcmp(own_block, block_sum.data() + rank * block * 8, block * 8), 0);

    // Broadcast from rank 1.
    std::vector<int64_t> value(3, rank == 1 ? 77 : -1);
    ASSERT_TRUE(comm.Broadcast(value.data(), value.size() * sizeof(int64_t), 1).ok());
    EXPECT_EQ(value, std::vector<int64_t>(3, 77));
    EXPECT_EQ(comm.Broadcast(value.data(), 8, 3).code(), absl::StatusCode::kInvalidArgument);

    // All-gather.
    const int32_t mine_value = 100 + rank;
    std::vector<int32_t> all(kWorld, 0);
    ASSERT_TRUE(comm.AllGather(&mine_value, sizeof(mine_value), all.data()).ok());
    EXPECT_EQ(all, (std::vector<int32_t>{100, 101, 102}));

    ASSERT_TRUE(comm.Barrier().ok());
  });
}

TEST(TcpMeshCommunicator, ReduceScatterSumsInTheSameOrderAsAllReduce) {
  // ZeRO-1 relies on it: the reduce-scattered shard equals the same range
  // of a plain all-reduce, bit for bit.
  constexpr int kWorld = 3;
  RunRanks(kWorld, [&](Communicator& comm) {
    for (DataType type : kTypes) {
      const size_t count = 1001;
      std::vector<char> reduced = Input(type, count, comm.rank());
      std::vector<char> scattered = reduced;
      ASSERT_TRUE(comm.AllReduce(reduced.data(), count, type).ok());
      ASSERT_TRUE(comm.ReduceScatterInPlaceAsync(scattered.data(), count, type)->Wait().ok());
      const ElementRange mine = comm.ReduceScatterLayout(count, type)[comm.rank()][0];
      const size_t element = DataTypeSize(type);
      EXPECT_EQ(std::memcmp(scattered.data() + mine.begin * element, reduced.data() + mine.begin * element,
                            mine.size() * element),
                0)
          << DataTypeName(type);
    }
  });
}

TEST(TcpMeshCommunicator, OpsInFlightTogetherOnLanesEachGetTheirOwnResult) {
  // Every kind of op issued back to back without waiting, so several run at
  // once on different lanes; more ops than lanes, so lanes are reused.
  constexpr int kWorld = 3;
  for (int lanes : {1, 3, kMaxTcpMeshLanes}) {
    RunRanks(
        kWorld,
        [&](Communicator& comm) {
          const int rank = comm.rank();
          constexpr int kRounds = 5;
          const size_t big = 400001;  // several pieces of the pipelined all-reduce
          std::vector<std::vector<char>> reduced(kRounds), scattered(kRounds);
          std::vector<std::vector<int32_t>> gathered(kRounds, std::vector<int32_t>(kWorld));
          std::vector<int32_t> mine(kRounds), broadcast(kRounds);
          std::vector<std::shared_ptr<Work>> works;
          for (int i = 0; i < kRounds; ++i) {
            reduced[i] = Input(DataType::kFloat32, big + i, rank);
            works.push_back(comm.AllReduceAsync(reduced[i].data(), big + i, DataType::kFloat32));
            mine[i] = 10 * i + rank;
            works.push_back(comm.AllGatherAsync(&mine[i], sizeof(int32_t), gathered[i].data()));
            broadcast[i] = rank == i % kWorld ? 1000 + i : -1;
            works.push_back(comm.BroadcastAsync(&broadcast[i], sizeof(int32_t), i % kWorld));
            scattered[i] = Input(DataType::kFloat64, 77 + i, rank);
            works.push_back(comm.ReduceScatterInPlaceAsync(scattered[i].data(), 77 + i, DataType::kFloat64));
            works.push_back(comm.BarrierAsync());
          }
          for (auto& work : works) ASSERT_TRUE(work->Wait().ok()) << "lanes " << lanes;
          for (int i = 0; i < kRounds; ++i) {
            EXPECT_EQ(reduced[i], RankOrderSum(DataType::kFloat32, big + i, kWorld)) << "lanes " << lanes << " op " << i;
            EXPECT_EQ(gathered[i], (std::vector<int32_t>{10 * i, 10 * i + 1, 10 * i + 2})) << "lanes " << lanes;
            EXPECT_EQ(broadcast[i], 1000 + i) << "lanes " << lanes;
            const std::vector<char> sum = RankOrderSum(DataType::kFloat64, 77 + i, kWorld);
            const ElementRange range = comm.ReduceScatterLayout(77 + i, DataType::kFloat64)[rank][0];
            EXPECT_EQ(std::memcmp(scattered[i].data() + range.begin * 8, sum.data() + range.begin * 8, range.size() * 8),
                      0)
                << "lanes " << lanes;
          }
        },
        lanes);
  }
}

TEST(TcpMeshCommunicator, LanesOutsideTheirBoundsAreRefusedByName) {
  InMemoryStore store;
  for (int lanes : {0, kMaxTcpMeshLanes + 1}) {
    auto comm = CreateTcpMeshCommunicator(store, Options(0, 2, milliseconds(200), lanes));
    ASSERT_FALSE(comm.ok());
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(comm.status().message(), "lanes")) << comm.status();
  }
}

TEST(TcpMeshCommunicator, APeerThatLeftFailsTheOpThenTheCommunicatorIsBroken) {
  InMemoryStore store;
  absl::StatusOr<std::unique_ptr<Communicator>> zero, one;
  std::thread t([&] { one = CreateTcpMeshCommunicator(store, Options(1, 2)); });
  zero = CreateTcpMeshCommunicator(store, Options(0, 2));
  t.join();
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_TRUE(one.ok()) << one.status();
  one->reset();  // rank 1 goes away: its sockets close
  float x = 1.0f;
  absl::Status failed = (*zero)->AllReduce(&x, 1, DataType::kFloat32);
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_TRUE(absl::StrContains(failed.message(), "rank 1")) << failed;
  EXPECT_EQ((*zero)->Barrier().code(), absl::StatusCode::kAborted);
}

TEST(TcpMeshCommunicator, AHungPeerFailsTheOpWithinTheTimeout) {
  InMemoryStore store;
  absl::StatusOr<std::unique_ptr<Communicator>> zero, one;
  std::thread t([&] { one = CreateTcpMeshCommunicator(store, Options(1, 2, milliseconds(200))); });
  zero = CreateTcpMeshCommunicator(store, Options(0, 2, milliseconds(200)));
  t.join();
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_TRUE(one.ok()) << one.status();  // alive, but never joins the barrier
  const auto started = std::chrono::steady_clock::now();
  absl::Status failed = (*zero)->Barrier();
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(failed.code(), absl::StatusCode::kDeadlineExceeded) << failed;
  EXPECT_GE(took, milliseconds(200));
  EXPECT_LT(took, milliseconds(10000));
}

}  // namespace
}  // namespace herd
