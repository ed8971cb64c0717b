// Ranks are threads of this process sharing an InMemoryStore; traffic goes
// over real TCP sockets on the loopback interface.
#include "worker/comm/gloo_communicator.h"

#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/bfloat16.h"
#include "worker/comm/in_memory_store.h"

namespace herd {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

GlooOptions OptionsFor(int rank, int size, milliseconds timeout, const std::string& prefix = "test/",
                       int threads = 1) {
  GlooOptions options;
  options.threads = threads;
  options.rank = rank;
  options.size = size;
  options.timeout = timeout;
  options.key_prefix = prefix;
  return options;
}

// Connects `size` ranks concurrently (rendezvous blocks until all arrive).
std::vector<std::unique_ptr<Communicator>> ConnectAll(int size, milliseconds timeout = milliseconds(10000),
                                                      std::shared_ptr<InMemoryStore> store = nullptr,
                                                      const std::string& prefix = "test/", int collective_threads = 1) {
  if (store == nullptr) store = std::make_shared<InMemoryStore>();
  std::vector<absl::StatusOr<std::unique_ptr<Communicator>>> results(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back(
        [&, rank] { results[rank] = CreateGlooCommunicator(OptionsFor(rank, size, timeout, prefix, collective_threads), store); });
  }
  for (auto& thread : threads) thread.join();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_TRUE(results[rank].ok()) << results[rank].status();
    if (!results[rank].ok()) return {};
    comms.push_back(std::move(*results[rank]));
  }
  return comms;
}

void OnEachRank(const std::vector<std::unique_ptr<Communicator>>& comms,
                const std::function<void(Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (auto& comm : comms) threads.emplace_back([&] { body(*comm); });
  for (auto& thread : threads) thread.join();
}

class GlooWorldTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorldTest, ReportsItsShape) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(comms[rank]->rank(), rank);
    EXPECT_EQ(comms[rank]->size(), world);
    EXPECT_EQ(comms[rank]->backend(), "gloo");
    EXPECT_EQ(comms[rank]->timeout(), milliseconds(10000));
  }
}

TEST_P(GlooWorldTest, AllReduceFloat32SumsExactly) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  // Over 1 MiB per rank so the ring splits the buffer into several segments;
  // small integers keep float sums exact.
  for (size_t count : {size_t{1}, size_t{7}, size_t{(1 << 19) + 3}}) {
    OnEachRank(comms, [&](Communicator& comm) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(comm.rank() * 1000 + i % 1000);
      ASSERT_TRUE(comm.AllReduce(data.data(), count, DataType::kFloat32).ok());
      for (size_t i = 0; i < count; ++i) {
        const float expected = static_cast<float>(1000 * world * (world - 1) / 2 + world * (i % 1000));
        ASSERT_EQ(data[i], expected) << "rank " << comm.rank() << " index " << i << " count " << count;
      }
    });
  }
}

TEST_P(GlooWorldTest, AllReduceInt64AndFloat64SumExactly) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  OnEachRank(comms, [&](Communicator& comm) {
    const size_t count = 1000;
    std::vector<int64_t> ints(count);
    std::vector<double> doubles(count);
    for (size_t i = 0; i < count; ++i) {
      ints[i] = (int64_t{1} << 40) * (comm.rank() + 1) - static_cast<int64_t>(i);
      doubles[i] = 0.5 * (comm.rank() + 1) + static_cast<double>(i);
    }
    ASSERT_TRUE(comm.AllReduce(ints.data(), count, DataType::kInt64).ok());
    ASSERT_TRUE(comm.AllReduce(doubles.data(), count, DataType::kFloat64).ok());
    const int64_t rank_sum = world * (world + 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(ints[i], (int64_t{1} << 40) * rank_sum - world * static_cast<int64_t>(i));
      ASSERT_EQ(doubles[i], 0.5 * rank_sum + world * static_cast<double>(i));
    }
  });
}

TEST_P(GlooWorldTest, AllReduceFloat16WithinHalfPrecision) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  auto value = [](int rank, size_t i) { return 0.013f * (rank + 1) * static_cast<float>(i % 97) - 0.4f; };
  OnEachRank(comms, [&](Communicator& comm) {
    const size_t count = 100000;
    std::vector<gloo::float16> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = gloo::cpu_float2half_rn(value(comm.rank(), i));
    ASSERT_TRUE(comm.AllReduce(data.data(), count, DataType::kFloat16).ok());
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < world; ++r) expected += value(r, i);
      // Inputs and each partial sum round once to 11 significant bits.
      const float got = gloo::cpu_half2float(data[i]);
      ASSERT_NEAR(got, expected, 3e-3f * world * std::max(1.0f, std::fabs(expected))) << i;
    }
  });
}

TEST_P(GlooWorldTest, AllReduceBFloat16WithinItsPrecision) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  auto value = [](int rank, size_t i) { return 0.37f * (rank + 1) * static_cast<float>(i % 89) - 3.0f; };
  OnEachRank(comms, [&](Communicator& comm) {
    const size_t count = 100000;
    std::vector<uint16_t> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = FloatToBFloat16(value(comm.rank(), i));
    ASSERT_TRUE(comm.AllReduce(data.data(), count, DataType::kBFloat16).ok());
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < world; ++r) expected += value(r, i);
      // 8 significant bits: each rounding is within 2^-8 relative.
      const float got = BFloat16ToFloat(data[i]);
      ASSERT_NEAR(got, expected, 8e-3f * world * std::max(1.0f, std::fabs(expected))) << i;
    }
    // The sum really happened in bf16 (not left as the input).
    EXPECT_NE(BFloat16ToFloat(data[5]), value(comm.rank(), 5));
  });
}

TEST_P(GlooWorldTest, BroadcastFromANonZeroRoot) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  const int root = world - 1;
  OnEachRank(comms, [&](Communicator& comm) {
    std::vector<uint8_t> data(3000001, 0);
    if (comm.rank() == root) {
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
    }
    ASSERT_TRUE(comm.Broadcast(data.data(), data.size(), root).ok());
    for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], static_cast<uint8_t>(i * 7 + 3)) << i;
  });
}

TEST_P(GlooWorldTest, AllGatherIsInRankOrder) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  OnEachRank(comms, [&](Communicator& comm) {
    const size_t bytes = 13;
    std::vector<uint8_t> mine(bytes);
    for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<uint8_t>(comm.rank() * 100 + i);
    std::vector<uint8_t> all(bytes * world, 255);
    ASSERT_TRUE(comm.AllGather(mine.data(), bytes, all.data()).ok());
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(all[r * bytes + i], static_cast<uint8_t>(r * 100 + i));
    }
  });
}

TEST_P(GlooWorldTest, BarrierWaitsForTheLastRank) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  std::atomic<bool> late_rank_arrived{false};
  OnEachRank(comms, [&](Communicator& comm) {
    if (comm.rank() == world - 1) {
      std::this_thread::sleep_for(milliseconds(300));
      late_rank_arrived = true;
      ASSERT_TRUE(comm.Barrier().ok());
    } else {
      ASSERT_TRUE(comm.Barrier().ok());
      EXPECT_TRUE(late_rank_arrived) << "rank " << comm.rank() << " left the barrier early";
    }
  });
}

TEST_P(GlooWorldTest, ManyOpsInFlightCompleteInIssueOrder) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  OnEachRank(comms, [&](Communicator& comm) {
    const int ops = 40;
    std::vector<std::vector<float>> buffers(ops);
    std::vector<std::vector<uint8_t>> broadcasts(ops);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < ops; ++k) {
      buffers[k].assign(1000 + 4000 * k, static_cast<float>(k + comm.rank()));
      works.push_back(comm.AllReduceAsync(buffers[k].data(), buffers[k].size(), DataType::kFloat32));
      broadcasts[k].assign(100, comm.rank() == k % world ? static_cast<uint8_t>(k) : 0);
      works.push_back(comm.BroadcastAsync(broadcasts[k].data(), broadcasts[k].size(), k % world));
    }
    for (auto& work : works) ASSERT_TRUE(work->Wait().ok());
    for (auto& work : works) EXPECT_TRUE(work->Done());
    for (int k = 0; k < ops; ++k) {
      const float expected = static_cast<float>(world * k + world * (world - 1) / 2);
      for (float v : buffers[k]) ASSERT_EQ(v, expected) << "op " << k;
      for (uint8_t b : broadcasts[k]) ASSERT_EQ(b, k) << "broadcast " << k;
    }
  });
}

// Sizes that do not divide by the world (the caller pads to whole blocks)
// and blocks over 1 MiB; into a separate buffer and in place; small
// integers keep float sums exact.
TEST_P(GlooWorldTest, ReduceScatterGivesEachRankTheSumOfItsBlock) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  auto value = [](int rank, size_t i) { return static_cast<float>(rank * 1000 + i % 1000); };
  for (size_t count : {size_t{1}, size_t{7}, size_t{(1 << 19) * 3 + 5}}) {
    const size_t block = ReduceScatterBlockCount(count, world);
    ASSERT_GE(block * world, count);
    ASSERT_LT(block * world - count, static_cast<size_t>(world));
    OnEachRank(comms, [&](Communicator& comm) {
      std::vector<float> data(block * world, 0.0f);  // zero padding past `count`
      for (size_t i = 0; i < count; ++i) data[i] = value(comm.rank(), i);
      std::vector<float> out(block, -1.0f);
      ASSERT_TRUE(comm.ReduceScatter(data.data(), out.data(), block, DataType::kFloat32).ok());
      float* own = data.data() + comm.rank() * block;
      ASSERT_TRUE(comm.ReduceScatter(data.data(), own, block, DataType::kFloat32).ok());
      for (size_t j = 0; j < block; ++j) {
        const size_t i = comm.rank() * block + j;
        float expected = 0;
        for (int r = 0; r < world && i < count; ++r) expected += value(r, i);
        ASSERT_EQ(out[j], expected) << "rank " << comm.rank() << " index " << i << " count " << count;
        ASSERT_EQ(own[j], expected) << "in place: rank " << comm.rank() << " index " << i << " count " << count;
      }
    });
  }
}

// The documented order: block c is x[c-1] + x[c-2] + ... + x[c]. Values
// where rank order gives a different float (1 + 1e8 - 1e8 is 0, -1e8 + 1e8
// + 1 is 1) show which order ran; int64 and float64 sum exactly.
TEST_P(GlooWorldTest, ReduceScatterSumsInRingOrderForEveryType) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  const size_t block = 5;
  auto value = [](int rank, size_t i) { return (rank + i) % 3 == 0 ? 1.0f : ((rank + i) % 3 == 1 ? 1e8f : -1e8f); };
  auto ring_sum = [&](size_t i) {
    const int owner = static_cast<int>(i / block);
    float sum = value((owner + world - 1) % world, i);
    for (int k = 2; k <= world; ++k) sum = value((owner + world - k) % world, i) + sum;
    return sum;
  };
  if (world == 3) {
    bool order_shows = false;
    for (size_t i = 0; i < block * world; ++i) {
      float rank_order = value(0, i);
      for (int r = 1; r < world; ++r) rank_order += value(r, i);
      order_shows = order_shows || rank_order != ring_sum(i);
    }
    ASSERT_TRUE(order_shows) << "the values do not tell the orders apart";
  }
  OnEachRank(comms, [&](Communicator& comm) {
    std::vector<float> floats(block * world);
    std::vector<int64_t> ints(block * world);
    std::vector<double> doubles(block * world);
    for (size_t i = 0; i < floats.size(); ++i) {
      floats[i] = value(comm.rank(), i);
      ints[i] = (int64_t{1} << 40) * (comm.rank() + 1) + static_cast<int64_t>(i);
      doubles[i] = 0.5 * (comm.rank() + 1) + static_cast<double>(i);
    }
    std::vector<float> float_out(block);
    std::vector<int64_t> int_out(block);
    std::vector<double> double_out(block);
    ASSERT_TRUE(comm.ReduceScatter(floats.data(), float_out.data(), block, DataType::kFloat32).ok());
    ASSERT_TRUE(comm.ReduceScatter(ints.data(), int_out.data(), block, DataType::kInt64).ok());
    ASSERT_TRUE(comm.ReduceScatter(doubles.data(), double_out.data(), block, DataType::kFloat64).ok());
    const int64_t rank_sum = world * (world + 1) / 2;
    for (size_t j = 0; j < block; ++j) {
      const size_t i = comm.rank() * block + j;
      ASSERT_EQ(float_out[j], ring_sum(i)) << "rank " << comm.rank() << " index " << i;
      ASSERT_EQ(int_out[j], (int64_t{1} << 40) * rank_sum + world * static_cast<int64_t>(i));
      ASSERT_EQ(double_out[j], 0.5 * rank_sum + world * static_cast<double>(i));
    }
  });
}

// Where Gloo's ring all-reduce splits a buffer into chunks that are exactly
// the reduce-scatter's blocks (2 * size segments of count / (2 * size)
// elements, two per chunk, below Gloo's segment cap), both sum every
// element in the same order: the reduce-scatter equals the all-reduce to the
// bit even with values whose sum depends on the order.
TEST_P(GlooWorldTest, ReduceScatterMatchesGloosRingAllReduceWhereItsChunksAreTheBlocks) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  const size_t block = 2 * 250;
  const size_t count = block * world;
  auto value = [](int rank, size_t i) {
    return (rank + i) % 3 == 0 ? 1.0f + 0.125f * (i % 7) : ((rank + i) % 3 == 1 ? 1e8f : -1e8f + 8.0f * (i % 5));
  };
  OnEachRank(comms, [&](Communicator& comm) {
    std::vector<float> summed(count);
    for (size_t i = 0; i < count; ++i) summed[i] = value(comm.rank(), i);
    std::vector<float> in = summed, out(block);
    ASSERT_TRUE(comm.AllReduce(summed.data(), count, DataType::kFloat32).ok());
    ASSERT_TRUE(comm.ReduceScatter(in.data(), out.data(), block, DataType::kFloat32).ok());
    size_t order_mattered = 0;
    for (size_t j = 0; j < block; ++j) {
      const size_t i = comm.rank() * block + j;
      ASSERT_EQ(out[j], summed[i]) << "rank " << comm.rank() << " index " << i;
      float rank_order = value(0, i);
      for (int r = 1; r < world; ++r) rank_order += value(r, i);
      order_mattered += rank_order != summed[i] ? 1 : 0;
    }
    if (world >= 3 && comm.rank() != world - 1) {
      EXPECT_GT(order_mattered, 0u) << "rank " << comm.rank() << ": values do not tell orders apart";
    }
  });
}

// The layout covers the buffer with disjoint ranges, the same on every rank.
void ExpectLayoutCovers(const RangeLayout& layout, size_t count, int world) {
  ASSERT_EQ(layout.size(), static_cast<size_t>(world));
  std::vector<int> owners(count, 0);
  for (const auto& ranges : layout) {
    for (const ElementRange& range : ranges) {
      ASSERT_LE(range.begin, range.end);
      ASSERT_LE(range.end, count);
      for (size_t i = range.begin; i < range.end; ++i) owners[i]++;
    }
  }
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(owners[i], 1) << "element " << i << " of " << count;
}

// The in-place reduce-scatter sums each rank's ranges of the layout exactly
// as the all-reduce sums them, to the bit, with values whose float sum
// depends on the order (so a layout other than Gloo's ring chunks would
// differ at W=3): small buffers, odd sizes, several segments per rank, and
// buffers from 4 MiB on that the all-reduce stripes over two rings.
TEST_P(GlooWorldTest, InPlaceReduceScatterEqualsTheAllReduceBitForBitOnEachRanksRanges) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  auto value = [](int rank, size_t i) {
    return (rank + i) % 3 == 0 ? 1.0f + 0.125f * (i % 7) : ((rank + i) % 3 == 1 ? 1e8f : -1e8f + 8.0f * (i % 5));
  };
  const size_t sizes[] = {1, 7, static_cast<size_t>(2 * world - 1), 1001, 250007, (1u << 20) + 3, 1500001};
  for (size_t count : sizes) {
    const RangeLayout layout = comms[0]->ReduceScatterLayout(count, DataType::kFloat32);
    ExpectLayoutCovers(layout, count, world);
    std::vector<size_t> order_mattered(world, 0);
    OnEachRank(comms, [&](Communicator& comm) {
      ASSERT_EQ(comm.ReduceScatterLayout(count, DataType::kFloat32), layout);
      std::vector<float> summed(count);
      for (size_t i = 0; i < count; ++i) summed[i] = value(comm.rank(), i);
      std::vector<float> scattered = summed;
      ASSERT_TRUE(comm.AllReduce(summed.data(), count, DataType::kFloat32).ok());
      ASSERT_TRUE(comm.ReduceScatterInPlaceAsync(scattered.data(), count, DataType::kFloat32)->Wait().ok());
      for (const ElementRange& range : layout[comm.rank()]) {
        for (size_t i = range.begin; i < range.end; ++i) {
          ASSERT_EQ(scattered[i], summed[i]) << "rank " << comm.rank() << " element " << i << " of " << count;
          float rank_order = value(0, i);
          for (int r = 1; r < world; ++r) rank_order += value(r, i);
          order_mattered[comm.rank()] += rank_order != summed[i] ? 1 : 0;
        }
      }
    });
    if (world >= 3 && count >= 1001) {
      size_t total = 0;
      for (size_t n : order_mattered) total += n;
      EXPECT_GT(total, 0u) << count << ": the values do not tell summation orders apart";
    }
  }
}

// Gloo's ring chunks, not near-equal blocks: with 2 * size segments of a
// rounded-up size the last rank's part is shorter, and a striped buffer
// gives every rank one part per stripe.
TEST_P(GlooWorldTest, ReduceScatterLayoutIsGloosRingChunksPerStripe) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  const size_t count = 1001;
  const RangeLayout layout = comms[0]->ReduceScatterLayout(count, DataType::kFloat32);
  // 2 * world segments of ceil(1001 / (2 * world)) elements, two per rank.
  const size_t group = 2 * ((count + 2 * world - 1) / (2 * world));
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(layout[r].size(), 1u);
    EXPECT_EQ(layout[r][0], (ElementRange{std::min(count, r * group), std::min(count, (r + 1) * group)}));
  }
  const size_t striped = 1500001;  // 6 MB: two stripes of 750001
  const RangeLayout two = comms[0]->ReduceScatterLayout(striped, DataType::kFloat32);
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(two[r].size(), 2u) << "rank " << r;
    EXPECT_LT(two[r][0].end, 750001u + 1);
    EXPECT_GE(two[r][1].begin, 750001u);
  }
}

TEST_P(GlooWorldTest, InPlaceReduceScatterOfCompressedAndExactTypes) {
  const int world = GetParam();
  auto comms = ConnectAll(world);
  ASSERT_EQ(comms.size(), static_cast<size_t>(world));
  const size_t count = 333;
  OnEachRank(comms, [&](Communicator& comm) {
    std::vector<uint16_t> halves(count), halves_summed;
    std::vector<int64_t> ints(count);
    for (size_t i = 0; i < count; ++i) {
      halves[i] = FloatToBFloat16(0.1f * static_cast<float>(i % 11) + 0.01f * comm.rank());
      ints[i] = (int64_t{1} << 40) * (comm.rank() + 1) + static_cast<int64_t>(i);
    }
    halves_summed = halves;
    ASSERT_TRUE(comm.AllReduce(halves_summed.data(), count, DataType::kBFloat16).ok());
    ASSERT_TRUE(comm.ReduceScatterInPlaceAsync(halves.data(), count, DataType::kBFloat16)->Wait().ok());
    ASSERT_TRUE(comm.ReduceScatterInPlaceAsync(ints.data(), count, DataType::kInt64)->Wait().ok());
    const int64_t rank_sum = world * (world + 1) / 2;
    const RangeLayout half_layout = comm.ReduceScatterLayout(count, DataType::kBFloat16);
    const RangeLayout int_layout = comm.ReduceScatterLayout(count, DataType::kInt64);
    for (const ElementRange& range : half_layout[comm.rank()]) {
      for (size_t i = range.begin; i < range.end; ++i) ASSERT_EQ(halves[i], halves_summed[i]) << i;
    }
    for (const ElementRange& range : int_layout[comm.rank()]) {
      for (size_t i = range.begin; i < range.end; ++i) {
        ASSERT_EQ(ints[i], (int64_t{1} << 40) * rank_sum + world * static_cast<int64_t>(i));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorldTest, ::testing::Values(2, 3));

TEST(GlooCommunicatorTest, ReduceScatterOnOneRankCopiesItsBlock) {
  auto comms = ConnectAll(1);
  ASSERT_EQ(comms.size(), 1u);
  std::vector<float> in = {1.5f, 2.5f, 3.5f};
  std::vector<float> out(3);
  ASSERT_TRUE(comms[0]->ReduceScatter(in.data(), out.data(), 3, DataType::kFloat32).ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE(comms[0]->ReduceScatter(in.data(), in.data(), 3, DataType::kFloat32).ok());
  EXPECT_EQ(in, (std::vector<float>{1.5f, 2.5f, 3.5f}));
}

// The failure rule holds for the ring as for Gloo's own collectives: a peer
// that never joins times the op out within the timeout, later ops abort at
// once; a destroyed peer fails it without waiting out the timeout.
TEST(GlooCommunicatorTest, ReduceScatterWithASilentPeerTimesOutThenLaterOpsAbort) {
  const milliseconds timeout(1000);
  auto comms = ConnectAll(3, timeout);
  ASSERT_EQ(comms.size(), 3u);
  std::vector<float> in(3000, 1.0f), out(1000);
  // Ranks 0 and 1 join; rank 2 is alive but never issues the op.
  std::vector<absl::Status> statuses(2);
  std::vector<Clock::duration> elapsed(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      std::vector<float> mine = in, result(1000);
      const auto start = Clock::now();
      statuses[rank] = comms[rank]->ReduceScatter(mine.data(), result.data(), 1000, DataType::kFloat32);
      elapsed[rank] = Clock::now() - start;
    });
  }
  for (auto& thread : threads) thread.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_FALSE(statuses[rank].ok()) << rank;
    EXPECT_TRUE(statuses[rank].code() == absl::StatusCode::kDeadlineExceeded ||
                statuses[rank].code() == absl::StatusCode::kUnavailable)
        << statuses[rank];
    EXPECT_LT(elapsed[rank], milliseconds(2500)) << rank;
  }
  // Rank 2 receives from rank 0 and sends to rank 1: rank 1 waits on it in
  // vain, so at least that rank timed out.
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded) << statuses[1];
  EXPECT_NE(statuses[1].message().find("reduce-scatter"), std::string::npos) << statuses[1];
  const auto start = Clock::now();
  absl::Status later = comms[1]->ReduceScatter(in.data(), out.data(), 1000, DataType::kFloat32);
  EXPECT_EQ(later.code(), absl::StatusCode::kAborted) << later;
  EXPECT_LT(Clock::now() - start, milliseconds(100));
}

TEST(GlooCommunicatorTest, ReduceScatterWithADestroyedPeerFailsFast) {
  const milliseconds timeout(5000);
  auto comms = ConnectAll(2, timeout);
  ASSERT_EQ(comms.size(), 2u);
  comms[1].reset();
  std::vector<float> in(200000, 1.0f), out(100000);
  const auto start = Clock::now();
  absl::Status status = comms[0]->ReduceScatter(in.data(), out.data(), 100000, DataType::kFloat32);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_LT(Clock::now() - start, milliseconds(2500));
}

TEST(GlooCommunicatorTest, SeveralThreadsOverlapOpsWithoutMixingThemUp) {
  auto comms = ConnectAll(3, milliseconds(10000), nullptr, "threads/", /*threads=*/3);
  ASSERT_EQ(comms.size(), 3u);
  OnEachRank(comms, [&](Communicator& comm) {
    const int ops = 30;
    std::vector<std::vector<int64_t>> buffers(ops);
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < ops; ++k) {
      buffers[k].assign(500 + 20000 * (k % 4), k * 10 + comm.rank());
      works.push_back(comm.AllReduceAsync(buffers[k].data(), buffers[k].size(), DataType::kInt64));
    }
    for (auto& work : works) ASSERT_TRUE(work->Wait().ok());
    for (int k = 0; k < ops; ++k) {
      for (int64_t v : buffers[k]) ASSERT_EQ(v, 3 * k * 10 + 3) << "op " << k;
    }
  });
}

TEST(GlooCommunicatorTest, SingleRankIsANoOp) {
  auto comms = ConnectAll(1);
  ASSERT_EQ(comms.size(), 1u);
  std::vector<float> data = {1.5f, 2.5f};
  ASSERT_TRUE(comms[0]->AllReduce(data.data(), 2, DataType::kFloat32).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, 2.5f}));
  const char in[3] = {'a', 'b', 'c'};
  char out[3] = {};
  ASSERT_TRUE(comms[0]->AllGather(in, 3, out).ok());
  EXPECT_EQ(std::string(out, 3), "abc");
  EXPECT_TRUE(comms[0]->Barrier().ok());
}

TEST(GlooCommunicatorTest, BadOptionsAreRejected) {
  auto store = std::make_shared<InMemoryStore>();
  auto bad_rank = CreateGlooCommunicator(OptionsFor(2, 2, milliseconds(1000)), store);
  EXPECT_EQ(bad_rank.status().code(), absl::StatusCode::kInvalidArgument);
  auto no_store = CreateGlooCommunicator(OptionsFor(0, 2, milliseconds(1000)), nullptr);
  EXPECT_EQ(no_store.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicatorTest, RankThatNeverJoinsMakesCreationTimeOut) {
  auto store = std::make_shared<InMemoryStore>();
  const auto start = Clock::now();
  auto result = CreateGlooCommunicator(OptionsFor(0, 2, milliseconds(1000)), store);
  const auto elapsed = Clock::now() - start;
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_NE(result.status().message().find("rank 0 of 2"), std::string::npos) << result.status();
  EXPECT_NE(result.status().message().find("test/"), std::string::npos) << result.status();
  EXPECT_LT(elapsed, milliseconds(2000));
}

// A peer that published its address and died (a trainer killed during
// rendezvous) while this rank is the side that waits for the connection:
// Gloo waits five of its context timeouts for a connect, which held a 30 s
// collective timeout's rendezvous for 150 s. Now the wait ends within the
// collective timeout. The dead peer listens on 127.0.0.2, which sorts above
// 127.0.0.1, so rank 0 is the listening side of the pair.
TEST(GlooCommunicatorTest, DeadPeersAddressFailsWithinTheCollectiveTimeout) {
  auto store = std::make_shared<InMemoryStore>();
  {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.2";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = device->createContext(1, 2);
    auto& pair = context->createPair(0);
    const std::vector<char> address = pair->address().bytes();
    ASSERT_TRUE(store->Set("test/1", std::string(address.begin(), address.end())).ok());
  }  // the peer is gone: its listening socket closed
  const auto start = Clock::now();
  auto result = CreateGlooCommunicator(OptionsFor(0, 2, milliseconds(1000)), store);
  const auto elapsed = Clock::now() - start;
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_LT(elapsed, milliseconds(2000)) << "5 s before: five times the timeout";
}

TEST(GlooCommunicatorTest, KeyPrefixSeparatesGenerations) {
  auto store = std::make_shared<InMemoryStore>();
  auto first = ConnectAll(2, milliseconds(10000), store, "gen1/");
  ASSERT_EQ(first.size(), 2u);
  // gen1's addresses are in the store, but a gen2 rank must not use them.
  auto lonely = CreateGlooCommunicator(OptionsFor(0, 2, milliseconds(500), "gen2/"), store);
  EXPECT_EQ(lonely.status().code(), absl::StatusCode::kDeadlineExceeded) << lonely.status();
  auto second = ConnectAll(2, milliseconds(10000), store, "gen3/");
  ASSERT_EQ(second.size(), 2u);
  OnEachRank(second, [](Communicator& comm) {
    int64_t value = comm.rank() + 1;
    ASSERT_TRUE(comm.AllReduce(&value, 1, DataType::kInt64).ok());
    EXPECT_EQ(value, 3);
  });
}

TEST(GlooCommunicatorTest, SilentPeerTimesOutThenEveryLaterOpAbortsFast) {
  const milliseconds timeout(1000);
  auto comms = ConnectAll(2, timeout);
  ASSERT_EQ(comms.size(), 2u);
  // Rank 1 is alive but never issues the op.
  std::vector<float> data(1000, 1.0f);
  auto start = Clock::now();
  absl::Status status = comms[0]->AllReduce(data.data(), data.size(), DataType::kFloat32);
  auto elapsed = Clock::now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_GE(elapsed, milliseconds(900));
  EXPECT_LT(elapsed, milliseconds(2000));

  start = Clock::now();
  absl::Status later = comms[0]->Barrier();
  EXPECT_EQ(later.code(), absl::StatusCode::kAborted) << later;
  EXPECT_NE(later.message().find(std::string(status.message())), std::string::npos) << later;
  EXPECT_LT(Clock::now() - start, milliseconds(100));

  // The timed-out rank closed its connections, so the silent peer's next op
  // fails too instead of waiting for a partner that has given up.
  start = Clock::now();
  absl::Status peer = comms[1]->AllReduce(data.data(), data.size(), DataType::kFloat32);
  EXPECT_FALSE(peer.ok());
  EXPECT_LT(Clock::now() - start, milliseconds(2000));

  start = Clock::now();
  comms.clear();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

TEST(GlooCommunicatorTest, DestroyedPeerFailsTheOtherRanksOp) {
  const milliseconds timeout(1000);
  auto comms = ConnectAll(2, timeout);
  ASSERT_EQ(comms.size(), 2u);
  comms[1].reset();
  std::vector<float> data(100000, 1.0f);
  auto start = Clock::now();
  absl::Status status = comms[0]->AllReduce(data.data(), data.size(), DataType::kFloat32);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == absl::StatusCode::kUnavailable ||
              status.code() == absl::StatusCode::kDeadlineExceeded)
      << status;
  EXPECT_LT(Clock::now() - start, milliseconds(1500));

  start = Clock::now();
  float one = 1;
  absl::Status later = comms[0]->AllReduce(&one, 1, DataType::kFloat32);
  EXPECT_EQ(later.code(), absl::StatusCode::kAborted) << later;
  EXPECT_LT(Clock::now() - start, milliseconds(100));
}

TEST(GlooCommunicatorTest, DestructionWithAnOpInFlightIsBoundedByTheTimeout) {
  const milliseconds timeout(1000);
  auto comms = ConnectAll(2, timeout);
  ASSERT_EQ(comms.size(), 2u);
  std::vector<float> in_flight(1000, 1.0f);
  std::vector<float> queued(1000, 1.0f);
  auto first = comms[0]->AllReduceAsync(in_flight.data(), in_flight.size(), DataType::kFloat32);
  auto second = comms[0]->AllReduceAsync(queued.data(), queued.size(), DataType::kFloat32);
  std::this_thread::sleep_for(milliseconds(50));
  const auto start = Clock::now();
  comms[0].reset();  // rank 1 never joins the op
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
  // The handles outlive the communicator and report what happened.
  EXPECT_TRUE(first->Done());
  EXPECT_FALSE(first->Wait().ok());
  EXPECT_EQ(second->Wait().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace herd
