#include "worker/train/sync/gradient_sync.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>

#include "worker/comm/testing/gloo_test_ranks.h"
#include "worker/comm/in_memory_store.h"
#include "worker/comm/shm_allreduce.h"

namespace herd {
namespace {

// A small MLP whose layers land in several buckets with tiny bucket caps.
struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 64));
    fc3 = register_module("fc3", torch::nn::Linear(64, 10));
  }
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Rank threads build their replicas concurrently; the global generator must
// not interleave between them, or the replicas would start different.
std::shared_ptr<Net> MakeNet() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(3);
  return std::make_shared<Net>();
}

struct Data {
  torch::Tensor x = torch::randn({12, 32}, torch::TensorOptions().dtype(torch::kFloat));
  torch::Tensor y = torch::randint(0, 10, {12}, torch::TensorOptions().dtype(torch::kLong));
};

// Gradients of the mean loss over rows [begin, end) of `data`, one model.
std::vector<torch::Tensor> ReferenceGrads(const Data& data, int64_t begin, int64_t end) {
  auto net = MakeNet();
  auto loss = torch::nn::functional::cross_entropy(net->forward(data.x.slice(0, begin, end)),
                                                   data.y.slice(0, begin, end));
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : net->parameters()) grads.push_back(p.grad().clone());
  return grads;
}

// Runs `body(rank, comm)` on `world` threads with Gloo communicators.
GradientSyncOptions TinyBuckets(DataType wire = DataType::kFloat32) {
  GradientSyncOptions options;
  options.first_bucket_mib = 1.0 / 1024;  // 1 KiB: one small layer per bucket
  options.bucket_cap_mib = 8.0 / 1024;
  options.wire_type = wire;
  return options;
}

// The shared-memory all-reduce in front of `gloo` (64 KiB slots, `in_place`
// bytes of in-place buckets); null, with a test failure, if it cannot start.
std::unique_ptr<Communicator> SharedMemoryInFront(Communicator* gloo, int rank, int world, size_t in_place,
                                                  std::shared_ptr<InMemoryStore> store) {
  ShmAllReduceOptions options;
  options.rank = rank;
  options.size = world;
  options.slot_bytes = 64 << 10;
  options.in_place_bytes = in_place;
  options.key_prefix = "shm/";
  auto created = CreateShmAllReduce(options, gloo, std::move(store));
  if (!created.ok()) {
    ADD_FAILURE() << created.status();
    return nullptr;
  }
  return std::move(*created);
}

// Each rank takes its share of 12 rows (an uneven split when `rows` differ),
// scales its loss by share, and after Finish() holds the global-mean gradient.
// With `shared_memory`, gradients are summed by the shared-memory all-reduce
// (in front of Gloo), and every bucket must live in its in-place area.
void ExpectSyncedGradsMatchFullBatch(const std::vector<std::pair<int64_t, int64_t>>& rows, int micro_batches,
                                     DataType compression, double tolerance, bool shared_memory = false) {
  torch::manual_seed(11);
  Data data;
  auto expected = ReferenceGrads(data, 0, 12);
  const int world = static_cast<int>(rows.size());
  std::vector<GradientSyncStats> stats(world);
  std::vector<int> in_place(world);
  std::vector<std::vector<torch::Tensor>> synced(world);
  auto store = std::make_shared<InMemoryStore>();
  RunGlooRanks(world, [&](int rank, Communicator* gloo) {
    std::unique_ptr<Communicator> shm = shared_memory ? SharedMemoryInFront(gloo, rank, world, 64 << 10, store) : nullptr;
    if (shared_memory) {
      ASSERT_NE(shm, nullptr);
    }
    Communicator* comm = shared_memory ? shm.get() : gloo;
    auto net = MakeNet();
    GradientSync sync(net->parameters(), comm, TinyBuckets(compression));
    in_place[rank] = sync.in_place_buckets();
    const auto [begin, end] = rows[rank];
    const int64_t n = end - begin;
    for (int m = 0; m < micro_batches; ++m) {
      if (m + 1 == micro_batches) sync.ArmForBackward();
      const int64_t mb = begin + n * m / micro_batches, me = begin + n * (m + 1) / micro_batches;
      if (me == mb) continue;
      std::lock_guard<std::mutex> compute(RankComputeMutex());
      auto loss = torch::nn::functional::cross_entropy(net->forward(data.x.slice(0, mb, me)), data.y.slice(0, mb, me));
      (loss * (static_cast<double>(me - mb) / 12.0)).backward();
    }
    ASSERT_TRUE(sync.Finish().ok());
    stats[rank] = sync.last_stats();
    // Not cloned: views into the buckets, read after the communicators are gone.
    for (auto& p : net->parameters()) synced[rank].push_back(p.grad());
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(synced[r].size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_LT((synced[r][i] - expected[i]).abs().max().item<double>(), tolerance) << "rank " << r << " param " << i;
      // Every rank holds exactly the same gradient, bit for bit.
      EXPECT_TRUE(torch::equal(synced[r][i], synced[0][i])) << "rank " << r << " param " << i;
    }
  }
  EXPECT_GT(stats[0].buckets, 2);
  for (int r = 0; r < world; ++r) EXPECT_EQ(in_place[r], shared_memory ? stats[0].buckets : 0) << "rank " << r;
}

TEST(GradientSync, TwoRanksEqualOneFullBatch) { ExpectSyncedGradsMatchFullBatch({{0, 6}, {6, 12}}, 1, DataType::kFloat32, 1e-6); }

// Buckets in shared memory, summed where they lie: the same gradients, and
// .grad views into the segment stay readable after the communicator is gone.
TEST(GradientSync, SharedMemoryBucketsSumInPlace) {
  ExpectSyncedGradsMatchFullBatch({{0, 6}, {6, 12}}, 1, DataType::kFloat32, 1e-6, /*shared_memory=*/true);
  ExpectSyncedGradsMatchFullBatch({{0, 5}, {5, 12}, {12, 12}}, 2, DataType::kFloat32, 1e-6, /*shared_memory=*/true);
}

TEST(GradientSync, UnevenAndEmptyShares) {
  ExpectSyncedGradsMatchFullBatch({{0, 9}, {9, 12}, {12, 12}}, 1, DataType::kFloat32, 1e-6);
}

TEST(GradientSync, AccumulationSyncsOnlyTheLastMicroBatch) {
  ExpectSyncedGradsMatchFullBatch({{0, 6}, {6, 12}}, 3, DataType::kFloat32, 1e-6);
}

TEST(GradientSync, CompressedWireStaysClose) {
  ExpectSyncedGradsMatchFullBatch({{0, 6}, {6, 12}}, 1, DataType::kFloat16, 2e-3);
  ExpectSyncedGradsMatchFullBatch({{0, 6}, {6, 12}}, 1, DataType::kBFloat16, 2e-2);
}

TEST(GradientSync, BucketsLaunchDuringBackward) {
  torch::manual_seed(5);
  Data data;
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto net = MakeNet();
    GradientSync sync(net->parameters(), comm, TinyBuckets());
    for (int step = 0; step < 3; ++step) {
      for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
      sync.ArmForBackward();
      {
        std::lock_guard<std::mutex> compute(RankComputeMutex());
        auto loss = torch::nn::functional::cross_entropy(net->forward(data.x), data.y);
        loss.backward();
      }
      ASSERT_TRUE(sync.Finish().ok());
      const auto& stats = sync.last_stats();
      // The overlap: buckets went on the wire from gradient hooks while
      // backward was still producing the remaining gradients.
      EXPECT_GE(stats.launched_during_backward, stats.buckets - 1);
      EXPECT_GE(stats.launched_during_backward, 1);
      EXPECT_GE(stats.first_launch_seconds, 0);
      EXPECT_LT(stats.first_launch_seconds, stats.backward_seconds);
      EXPECT_GT(stats.wire_bytes, 0);
    }
  });
}

// One rank: .grad is already the sum, so nothing is copied or sent. The
// gradients are bit for bit plain backward's, accumulated over micro-batches,
// and a parameter backward does not reach still gets zeros (as a bucket slot
// would give it, so momentum keeps moving it at every world size).
TEST(GradientSync, OneRankKeepsAutogradsGradientsWithoutCopies) {
  torch::manual_seed(11);
  Data data;
  auto reference = MakeNet();
  for (int m = 0; m < 3; ++m) {
    auto loss = torch::nn::functional::cross_entropy(reference->forward(data.x.slice(0, 4 * m, 4 * m + 4)),
                                                     data.y.slice(0, 4 * m, 4 * m + 4));
    (loss / 3.0).backward();
  }
  RunGlooRanks(1, [&](int, Communicator* comm) {
    auto net = MakeNet();
    auto unused = torch::ones({3}, torch::requires_grad());
    auto params = net->parameters();
    params.push_back(unused);
    GradientSync sync(params, comm, TinyBuckets());
    for (int m = 0; m < 3; ++m) {
      if (m == 2) sync.ArmForBackward();
      auto loss = torch::nn::functional::cross_entropy(net->forward(data.x.slice(0, 4 * m, 4 * m + 4)),
                                                       data.y.slice(0, 4 * m, 4 * m + 4));
      (loss / 3.0).backward();
    }
    const void* before = net->parameters()[0].grad().data_ptr();
    ASSERT_TRUE(sync.Finish().ok());
    EXPECT_EQ(net->parameters()[0].grad().data_ptr(), before) << "the gradient was copied";
    for (size_t i = 0; i < reference->parameters().size(); ++i) {
      EXPECT_TRUE(torch::equal(net->parameters()[i].grad(), reference->parameters()[i].grad())) << "param " << i;
    }
    ASSERT_TRUE(unused.grad().defined());
    EXPECT_TRUE(torch::equal(unused.grad(), torch::zeros({3})));
    EXPECT_EQ(sync.last_stats().wire_bytes, 0);
    EXPECT_EQ(sync.in_place_buckets(), 0);
    EXPECT_GT(sync.bucket_elements().size(), 2u);  // the plan is still reported
  });
}

// Reduce-scatter mode (sync.shard_optimizer): each rank's pieces cover
// every parameter element exactly once over all ranks, and hold bit for bit
// the all-reduce mode's sums (Gloo TCP at W=3, where the summation order
// shows; with and without shared memory; and over a bf16 wire); each bucket
// costs half the bytes; and the elements a rank does not own do NOT all
// hold the global sum (they would if the buckets were all-reduced).
void ExpectReduceScatterMatchesAllReduceOnOwnPieces(bool shared_memory, DataType wire) {
  torch::manual_seed(13);
  Data data;
  const int world = 3;
  const std::vector<std::pair<int64_t, int64_t>> rows = {{0, 5}, {5, 9}, {9, 12}};
  auto store = std::make_shared<InMemoryStore>();
  std::vector<std::vector<ShardPiece>> pieces(world);
  RunGlooRanks(world, [&](int rank, Communicator* gloo) {
    std::unique_ptr<Communicator> shm =
        shared_memory ? SharedMemoryInFront(gloo, rank, world, 2 * (64 << 10), store) : nullptr;
    if (shared_memory) {
      ASSERT_NE(shm, nullptr);
    }
    Communicator* comm = shared_memory ? shm.get() : gloo;
    auto plain_net = MakeNet();
    auto scatter_net = MakeNet();
    GradientSyncOptions scatter_options = TinyBuckets(wire);
    scatter_options.reduce_scatter = true;
    GradientSync plain(plain_net->parameters(), comm, TinyBuckets(wire));
    GradientSync scatter(scatter_net->parameters(), comm, scatter_options);
    EXPECT_TRUE(plain.scattered_pieces().empty());
    pieces[rank] = scatter.scattered_pieces();
    const auto [begin, end] = rows[rank];
    for (auto* pair : {&plain, &scatter}) {
      auto net = pair == &plain ? plain_net : scatter_net;
      pair->ArmForBackward();
      {
        std::lock_guard<std::mutex> compute(RankComputeMutex());
        auto loss = torch::nn::functional::cross_entropy(net->forward(data.x.slice(0, begin, end)),
                                                         data.y.slice(0, begin, end));
        (loss * (static_cast<double>(end - begin) / 12.0)).backward();
      }
      ASSERT_TRUE(pair->Finish().ok());
    }
    EXPECT_EQ(scatter.last_stats().buckets, plain.last_stats().buckets);
    EXPECT_EQ(2 * scatter.last_stats().wire_bytes, plain.last_stats().wire_bytes);
    const auto plain_params = plain_net->parameters(), scatter_params = scatter_net->parameters();
    int64_t owned = 0;
    for (const ShardPiece& piece : scatter.scattered_pieces()) {
      if (piece.rank != rank) continue;
      owned += piece.length;
      auto want = plain_params[piece.param].grad().reshape({-1}).narrow(0, piece.offset, piece.length);
      auto got = scatter_params[piece.param].grad().reshape({-1}).narrow(0, piece.offset, piece.length);
      ASSERT_TRUE(torch::equal(got, want)) << "rank " << rank << " param " << piece.param << " at " << piece.offset;
    }
    EXPECT_GT(owned, 0);
    int64_t foreign_equal = 0, foreign = 0;
    for (const ShardPiece& piece : scatter.scattered_pieces()) {
      if (piece.rank == rank) continue;
      auto want = plain_params[piece.param].grad().reshape({-1}).narrow(0, piece.offset, piece.length);
      auto got = scatter_params[piece.param].grad().reshape({-1}).narrow(0, piece.offset, piece.length);
      foreign_equal += got.eq(want).sum().item<int64_t>();
      foreign += piece.length;
    }
    EXPECT_LT(foreign_equal, foreign / 2) << "rank " << rank << ": the buckets look all-reduced";
  });
  // Every rank computed the same layout, which covers every element once.
  auto net = MakeNet();
  std::vector<std::vector<int>> covered;
  for (const auto& p : net->parameters()) covered.emplace_back(p.numel(), 0);
  for (int r = 0; r < world; ++r) ASSERT_EQ(pieces[r], pieces[0]) << "rank " << r;
  std::vector<int64_t> per_rank(world, 0);
  for (const ShardPiece& piece : pieces[0]) {
    per_rank[piece.rank] += piece.length;
    for (int64_t i = piece.offset; i < piece.offset + piece.length; ++i) covered[piece.param][i]++;
  }
  for (const auto& counts : covered) {
    for (int c : counts) ASSERT_EQ(c, 1);
  }
  for (int r = 0; r < world; ++r) EXPECT_GT(per_rank[r], 0) << "rank " << r;
}

TEST(GradientSync, ReduceScatterModeEqualsAllReduceOnEachRanksPiecesAtHalfTheBytes) {
  ExpectReduceScatterMatchesAllReduceOnOwnPieces(/*shared_memory=*/false, DataType::kFloat32);
}

TEST(GradientSync, ReduceScatterModeInSharedMemory) {
  ExpectReduceScatterMatchesAllReduceOnOwnPieces(/*shared_memory=*/true, DataType::kFloat32);
}

TEST(GradientSync, ReduceScatterModeOverACompressedWire) {
  ExpectReduceScatterMatchesAllReduceOnOwnPieces(/*shared_memory=*/false, DataType::kBFloat16);
}

TEST(GradientSync, BucketsFollowReverseRegistrationOrder) {
  auto net = MakeNet();
  RunGlooRanks(1, [&](int, Communicator* comm) {
    GradientSyncOptions options;
    options.first_bucket_mib = 1.0 / 1024;  // 256 floats
    options.bucket_cap_mib = 100;
    GradientSync sync(net->parameters(), comm, options);
    auto sizes = sync.bucket_elements();
    // fc3 (10 biases, 64*10 weights) is last registered, so it is first; its
    // weights cross the 256-float cap and close the first bucket (as in DDP),
    // the rest goes to the big one.
    ASSERT_EQ(sizes.size(), 2u);
    EXPECT_EQ(sizes[0], 10 + 64 * 10);
    EXPECT_EQ(sizes[1], 64 + 64 * 64 + 64 + 32 * 64);
  });
}

}  // namespace
}  // namespace herd
