#include "worker/comm/shm_allreduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "worker/comm/testing/gloo_test_ranks.h"
#include "worker/comm/in_memory_store.h"

namespace herd {
namespace {

ShmAllReduceOptions Options(int rank, int size, size_t slot_bytes, std::chrono::milliseconds timeout) {
  ShmAllReduceOptions options;
  options.rank = rank;
  options.size = size;
  options.slot_bytes = slot_bytes;
  options.timeout = timeout;
  options.key_prefix = "test/";
  return options;
}

// Sums of every size around the chunk boundaries, several ops in a row (the
// slots are reused), with a buffer too large for the slots going to Gloo and
// a non-float32 one too: all exact, on every rank.
TEST(ShmAllReduce, SumsLikeGlooForEverySizeAndDelegatesTheRest) {
  for (int world : {2, 3}) {
    auto store = std::make_shared<InMemoryStore>();
    RunGlooRanks(world, [&](int rank, Communicator* gloo) {
      auto shm = CreateShmAllReduce(Options(rank, world, 4096 * sizeof(float), std::chrono::seconds(20)), gloo, store);
      ASSERT_TRUE(shm.ok()) << shm.status();
      EXPECT_EQ((*shm)->backend(), "gloo+shm");
      for (size_t count : {1, 2, 3, 7, 1000, 4096, 5000}) {  // 5000 floats exceed the slot: Gloo
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i);
        ASSERT_TRUE((*shm)->AllReduce(data.data(), count, DataType::kFloat32).ok()) << count;
        for (size_t i = 0; i < count; ++i) {
          float expected = 0;
          for (int r = 0; r < world; ++r) expected += static_cast<float>(r + 1) * 0.5f + static_cast<float>(i);
          ASSERT_EQ(data[i], expected) << "world " << world << " count " << count << " index " << i;
        }
      }
      double value = rank + 1;
      ASSERT_TRUE((*shm)->AllReduce(&value, 1, DataType::kFloat64).ok());
      EXPECT_EQ(value, world * (world + 1) / 2.0);
    });
  }
}

// Rank r's element i: values whose sum over ranks rounds differently in
// another summation order.
float OrderSensitiveValue(int r, size_t i) {
  return (r + i) % 3 == 0 ? 1.0f : ((r + i) % 3 == 1 ? 1e8f : -1e8f + 0.25f * i);
}

// Each rank's block of a reduce-scatter is, to the bit, what the all-reduce
// of the same data gives there (both sum in rank order; the values make
// other orders round differently), from an ordinary buffer, from an
// in-place one and in place (out = in + rank * block); a buffer past the slot
// goes to Gloo and still sums its block.
TEST(ShmAllReduce, ReduceScatterMatchesTheAllReduceBitForBit) {
  for (int world : {1, 2, 3}) {
    auto store = std::make_shared<InMemoryStore>();
    RunGlooRanks(world, [&](int rank, Communicator* gloo) {
      ShmAllReduceOptions options = Options(rank, world, 4096 * sizeof(float), std::chrono::seconds(20));
      options.in_place_bytes = 4096 * sizeof(float);
      auto shm = CreateShmAllReduce(options, gloo, store);
      ASSERT_TRUE(shm.ok()) << shm.status();
      std::shared_ptr<void> slot_buffer = (*shm)->AllocateAllReduceBuffer(4096 * sizeof(float));
      ASSERT_NE(slot_buffer, nullptr);
      for (size_t count : {1, 7, 3001, 4096, 6000}) {  // 6000 floats exceed the slot: Gloo
        const size_t block = ReduceScatterBlockCount(count, world);
        const bool via_gloo = count > 4096;
        // Gloo's ring sums in another order than its all-reduce may: small integers there, exact either way.
        auto input_at = [&](int r, size_t i) { return via_gloo ? static_cast<float>(r * 100 + i % 100) : OrderSensitiveValue(r, i); };
        std::vector<float> summed(block * world, 0.0f);
        for (size_t i = 0; i < count; ++i) summed[i] = input_at(rank, i);
        std::vector<float> input = summed;
        ASSERT_TRUE((*shm)->AllReduce(summed.data(), summed.size(), DataType::kFloat32).ok());
        std::vector<float> out(block);
        ASSERT_TRUE((*shm)->ReduceScatter(input.data(), out.data(), block, DataType::kFloat32).ok());
        std::vector<float> in_place = input;
        float* own = in_place.data() + rank * block;
        ASSERT_TRUE((*shm)->ReduceScatter(in_place.data(), own, block, DataType::kFloat32).ok());
        if (via_gloo) {
          for (size_t j = 0; j < block; ++j) {
            ASSERT_EQ(out[j], summed[rank * block + j]) << "via Gloo: world " << world << " at " << j;
            ASSERT_EQ(own[j], summed[rank * block + j]) << "via Gloo in place: world " << world << " at " << j;
          }
          continue;
        }
        float* in_slot = static_cast<float*>(slot_buffer.get());
        std::copy(input.begin(), input.end(), in_slot);
        std::vector<float> from_slot(block);
        ASSERT_TRUE((*shm)->ReduceScatter(in_slot, from_slot.data(), block, DataType::kFloat32).ok());
        for (size_t j = 0; j < block; ++j) {
          const float want = summed[rank * block + j];
          ASSERT_EQ(out[j], want) << "world " << world << " count " << count << " at " << j;
          ASSERT_EQ(own[j], want) << "in place: world " << world << " count " << count << " at " << j;
          ASSERT_EQ(from_slot[j], want) << "slot buffer: world " << world << " count " << count << " at " << j;
        }
      }
    });
  }
}

// Overlapping async ops complete in issue order with their own results.
// The in-place reduce-scatter sums each rank's ranges of its layout to the
// bit as the all-reduce does, from an ordinary buffer and from an in-place
// slot buffer (the gradient buckets' case), with values whose sum depends on
// the order; past the slot both go to Gloo, whose layout is its ring's.
TEST(ShmAllReduce, InPlaceReduceScatterMatchesTheAllReduceOnItsLayout) {
  for (int world : {1, 2, 3}) {
    auto store = std::make_shared<InMemoryStore>();
    RunGlooRanks(world, [&](int rank, Communicator* gloo) {
      ShmAllReduceOptions options = Options(rank, world, 4096 * sizeof(float), std::chrono::seconds(20));
      options.in_place_bytes = 4096 * sizeof(float);
      auto shm = CreateShmAllReduce(options, gloo, store);
      ASSERT_TRUE(shm.ok()) << shm.status();
      std::shared_ptr<void> slot_buffer = (*shm)->AllocateAllReduceBuffer(4096 * sizeof(float));
      ASSERT_NE(slot_buffer, nullptr);
      for (size_t count : {1, 7, 3001, 4096, 6001}) {  // 6001 floats exceed the slot: Gloo
        const RangeLayout layout = (*shm)->ReduceScatterLayout(count, DataType::kFloat32);
        ASSERT_EQ(layout.size(), static_cast<size_t>(world));
        if (count > 4096) {
          EXPECT_EQ(layout, gloo->ReduceScatterLayout(count, DataType::kFloat32));
        } else {
          EXPECT_EQ(layout, NearEqualRanges(count, world));
        }
        std::vector<float> summed(count);
        for (size_t i = 0; i < count; ++i) summed[i] = OrderSensitiveValue(rank, i);
        std::vector<float> ordinary = summed;
        ASSERT_TRUE((*shm)->AllReduce(summed.data(), count, DataType::kFloat32).ok());
        ASSERT_TRUE((*shm)->ReduceScatterInPlaceAsync(ordinary.data(), count, DataType::kFloat32)->Wait().ok());
        float* in_slot = static_cast<float*>(slot_buffer.get());
        const bool fits = count <= 4096;
        if (fits) {
          for (size_t i = 0; i < count; ++i) in_slot[i] = OrderSensitiveValue(rank, i);
          ASSERT_TRUE((*shm)->ReduceScatterInPlaceAsync(in_slot, count, DataType::kFloat32)->Wait().ok());
        }
        for (const ElementRange& range : layout[rank]) {
          for (size_t i = range.begin; i < range.end; ++i) {
            ASSERT_EQ(ordinary[i], summed[i]) << "world " << world << " count " << count << " at " << i;
            if (fits) {
              ASSERT_EQ(in_slot[i], summed[i]) << "slot: world " << world << " count " << count << " at " << i;
            }
          }
        }
      }
    });
  }
}

TEST(ShmAllReduce, AsyncOpsInFlightKeepTheirOwnData) {
  auto store = std::make_shared<InMemoryStore>();
  RunGlooRanks(2, [&](int rank, Communicator* gloo) {
    auto shm = CreateShmAllReduce(Options(rank, 2, 1 << 16, std::chrono::seconds(20)), gloo, store);
    ASSERT_TRUE(shm.ok()) << shm.status();
    std::vector<std::vector<float>> buffers(8, std::vector<float>(100));
    std::vector<std::shared_ptr<Work>> works;
    for (size_t b = 0; b < buffers.size(); ++b) {
      std::fill(buffers[b].begin(), buffers[b].end(), static_cast<float>(b * 10 + rank));
      works.push_back((*shm)->AllReduceAsync(buffers[b].data(), 100, DataType::kFloat32));
    }
    for (size_t b = 0; b < buffers.size(); ++b) {
      ASSERT_TRUE(works[b]->Wait().ok());
      EXPECT_EQ(buffers[b][99], static_cast<float>(2 * b * 10 + 1)) << b;
    }
  });
}

// Buffers from AllocateAllReduceBuffer are summed where they lie. Ranks may
// mix them with ordinary buffers (each rank says where its data is), the
// buffers are handed out aligned until the in-place area is used up, never
// larger than the shared-memory path takes, and stay mapped after the
// communicator is gone.
TEST(ShmAllReduce, InPlaceBuffersMixWithCopiedOnesAndOutliveTheCommunicator) {
  for (int world : {2, 3}) {
    auto store = std::make_shared<InMemoryStore>();
    std::vector<std::shared_ptr<void>> kept(world);
    RunGlooRanks(world, [&](int rank, Communicator* gloo) {
      ShmAllReduceOptions options = Options(rank, world, 4096 * sizeof(float), std::chrono::seconds(20));
      options.in_place_bytes = 5120 * sizeof(float);  // whole pages: the area is not rounded up
      auto shm = CreateShmAllReduce(options, gloo, store);
      ASSERT_TRUE(shm.ok()) << shm.status();
      EXPECT_EQ((*shm)->AllocateAllReduceBuffer(4097 * sizeof(float)), nullptr);  // larger than the path takes
      std::shared_ptr<void> a = (*shm)->AllocateAllReduceBuffer(3 * sizeof(float));
      std::shared_ptr<void> b = (*shm)->AllocateAllReduceBuffer(4096 * sizeof(float));
      ASSERT_NE(a, nullptr);
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
      EXPECT_EQ((*shm)->AllocateAllReduceBuffer(2000 * sizeof(float)), nullptr);  // the area is used up
      std::vector<float> ordinary(4096);
      for (int round = 0; round < 3; ++round) {
        for (size_t count : {1, 3, 1000, 4096}) {
          // Rank 1 alternates between its in-place buffer and an ordinary one.
          float* data = count <= 3 ? static_cast<float*>(a.get()) : static_cast<float*>(b.get());
          if (rank == 1 && (round + count) % 2 == 0) data = ordinary.data();
          for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>(rank * 1000 + round) + 0.25f * i;
          ASSERT_TRUE((*shm)->AllReduce(data, count, DataType::kFloat32).ok()) << count;
          for (size_t i = 0; i < count; ++i) {
            float expected = 0;
            for (int r = 0; r < world; ++r) expected += static_cast<float>(r * 1000 + round) + 0.25f * i;
            ASSERT_EQ(data[i], expected) << "world " << world << " round " << round << " count " << count << " at " << i;
          }
        }
      }
      static_cast<float*>(b.get())[4095] = 7;
      kept[rank] = b;
    });
    // The communicators are destroyed; the segment is still mapped for the buffers.
    for (int r = 0; r < world; ++r) EXPECT_EQ(static_cast<float*>(kept[r].get())[4095], 7.0f);
  }
}

// A rank that never joins the op: the other's wait is bounded by the timeout,
// and the communicator stays broken afterwards. A rank that abandons the
// segment (its communicator destroyed) fails a waiting peer at once.
TEST(ShmAllReduce, MissingPeerTimesOutAndAbandonedPeerFailsFast) {
  auto store = std::make_shared<InMemoryStore>();
  std::mutex mu;
  std::vector<absl::Status> first(2), second(2);
  std::vector<double> waited(2);
  RunGlooRanks(2, [&](int rank, Communicator* gloo) {
    auto shm = CreateShmAllReduce(Options(rank, 2, 1 << 12, std::chrono::milliseconds(300)), gloo, store);
    ASSERT_TRUE(shm.ok()) << shm.status();
    float x = 1;
    if (rank == 0) {
      const auto start = std::chrono::steady_clock::now();
      absl::Status a = (*shm)->AllReduce(&x, 1, DataType::kFloat32);
      absl::Status b = (*shm)->AllReduce(&x, 1, DataType::kFloat32);
      std::lock_guard<std::mutex> lock(mu);
      first[0] = a;
      second[0] = b;
      waited[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    ASSERT_TRUE(gloo->Barrier().ok());  // rank 1 stays away until rank 0 gave up
  });
  EXPECT_EQ(first[0].code(), absl::StatusCode::kDeadlineExceeded) << first[0];
  EXPECT_EQ(second[0].code(), absl::StatusCode::kAborted) << second[0];
  EXPECT_GE(waited[0], 0.3);

  auto store2 = std::make_shared<InMemoryStore>();
  RunGlooRanks(2, [&](int rank, Communicator* gloo) {
    auto shm = CreateShmAllReduce(Options(rank, 2, 1 << 12, std::chrono::seconds(20)), gloo, store2);
    ASSERT_TRUE(shm.ok()) << shm.status();
    float x = 1;
    if (rank == 1) {
      shm->reset();  // leaves without joining
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = (*shm)->AllReduce(&x, 1, DataType::kFloat32);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_LT(seconds, 5.0);
  });
}

}  // namespace
}  // namespace herd
