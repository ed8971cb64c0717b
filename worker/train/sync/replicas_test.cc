// The replica checks: the hashes see any change, and the end-of-training
// check names the rank and tensor that differ while moving only hashes.
#include "worker/train/sync/replicas.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "worker/comm/in_memory_store.h"
#include "worker/comm/tcp_mesh_communicator.h"

namespace herd {
namespace {

std::vector<torch::Tensor> Params() {
  return {torch::arange(0, 24, torch::kFloat).reshape({4, 6}) / 7, torch::arange(0, 5, torch::kFloat) - 2,
          torch::arange(0, 3, torch::kDouble)};
}

// Flips bit `bit` (0: lowest) of the float at `index` of `tensor` in place.
void FlipBit(torch::Tensor& tensor, int64_t index, int bit) {
  uint32_t word;
  float* value = tensor.data_ptr<float>() + index;
  std::memcpy(&word, value, 4);
  word ^= 1u << bit;
  std::memcpy(value, &word, 4);
}

TEST(ReplicaHashes, AnySingleFlippedBitChangesTheHash) {
  const std::vector<torch::Tensor> params = Params();
  const uint64_t base = ParameterHash(params);
  for (int64_t index : {0, 7, 23}) {
    for (int bit : {0, 17, 31}) {
      std::vector<torch::Tensor> changed = Params();
      FlipBit(changed[0], index, bit);
      EXPECT_NE(ParameterHash(changed), base) << "value " << index << " bit " << bit;
      EXPECT_NE(TensorHashes(changed)[0], TensorHashes(params)[0]) << "value " << index << " bit " << bit;
      EXPECT_EQ(TensorHashes(changed)[1], TensorHashes(params)[1]);
    }
  }
}

// Two sign flips at the top bit of two 8-byte words: FNV over words (xor,
// then multiply) maps both to the same hash, since the top bit of a product
// by an odd number depends only on the top bits; the mixed hash does not.
TEST(ReplicaHashes, TwoFlippedTopBitsDoNotCancel) {
  const std::vector<torch::Tensor> params = Params();
  std::vector<torch::Tensor> changed = Params();
  FlipBit(changed[0], 1, 31);  // the top bit of word 0
  FlipBit(changed[0], 3, 31);  // the top bit of word 1
  EXPECT_NE(ParameterHash(changed), ParameterHash(params));
  EXPECT_NE(TensorHashes(changed)[0], TensorHashes(params)[0]);
}

TEST(ReplicaHashes, TheSameBytesInAnotherSplitHashDifferently) {
  // One tensor of 6 values against two of 3: the per-tensor layout is part of what is compared.
  const torch::Tensor whole = torch::arange(0, 6, torch::kFloat);
  EXPECT_NE(ParameterHash({whole}), ParameterHash({whole.narrow(0, 0, 3), whole.narrow(0, 3, 3)}));
}

std::unique_ptr<Communicator> Mesh(RendezvousStore& store, int rank, int world) {
  TcpMeshOptions options;
  options.mesh.key_prefix = "mesh/";
  options.mesh.generation = 1;
  options.mesh.rank = rank;
  options.mesh.world_size = world;
  options.mesh.listen_host = "127.0.0.1";
  options.mesh.advertise_host = "127.0.0.1";
  options.mesh.timeout = std::chrono::milliseconds(20000);
  options.timeout = std::chrono::milliseconds(20000);
  auto comm = CreateTcpMeshCommunicator(store, options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

// Three ranks run VerifyReplicasBitwise; `edit` may change a rank's copy.
std::map<int, absl::Status> Verify(const std::function<void(int rank, std::vector<torch::Tensor>&)>& edit) {
  constexpr int kWorld = 3;
  std::map<int, absl::Status> results;
  std::mutex mu;
  InMemoryStore store;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.emplace_back([&, rank] {
      auto comm = Mesh(store, rank, kWorld);
      ASSERT_NE(comm, nullptr);
      std::vector<torch::Tensor> params = Params();
      edit(rank, params);
      absl::Status status = VerifyReplicasBitwise(comm.get(), params);
      std::lock_guard<std::mutex> lock(mu);
      results[rank] = status;
    });
  }
  for (auto& t : ranks) t.join();
  return results;
}

TEST(VerifyReplicasBitwise, IdenticalReplicasPass) {
  for (const auto& [rank, status] : Verify([](int, std::vector<torch::Tensor>&) {})) {
    EXPECT_TRUE(status.ok()) << "rank " << rank << ": " << status;
  }
}

TEST(VerifyReplicasBitwise, OneFlippedBitOnOneRankFailsEveryRankNamingItAndTheTensor) {
  const auto results = Verify([](int rank, std::vector<torch::Tensor>& params) {
    if (rank == 2) FlipBit(params[1], 4, 0);  // the last value of tensor 1, its lowest bit
  });
  for (const auto& [rank, status] : results) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << "rank " << rank << ": " << status;
    EXPECT_NE(status.message().find("rank 2's parameter tensor 1 (5 values) differs from rank 0's"),
              std::string::npos)
        << "rank " << rank << ": " << status;
  }
}

}  // namespace
}  // namespace herd
