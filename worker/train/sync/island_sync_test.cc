// Mode average across islands with every rank a thread and real TCP meshes
// for the generation, each island and each cross group (one store, the
// prefixes the trainer's group communicators use).
#include "worker/train/sync/island_sync.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "worker/comm/in_memory_store.h"
#include "worker/comm/peer_fault.h"
#include "worker/comm/subgroup_communicator.h"
#include "worker/comm/tcp_mesh_communicator.h"
#include "worker/train/sync/replicas.h"
#include "worker/train/sync/sync_strategy.h"

namespace herd {
namespace {

using std::chrono::milliseconds;

google::protobuf::RepeatedPtrField<v1::Peer> Peers(const std::vector<std::string>& sites) {
  google::protobuf::RepeatedPtrField<v1::Peer> peers;
  for (size_t r = 0; r < sites.size(); ++r) {
    v1::Peer* peer = peers.Add();
    peer->set_rank(static_cast<int64_t>(r));
    (*peer->mutable_labels())["site"] = sites[r];
  }
  return peers;
}

std::unique_ptr<Communicator> Mesh(RendezvousStore& store, const std::string& prefix, int rank, int world) {
  TcpMeshOptions options;
  options.mesh.key_prefix = prefix;
  options.mesh.generation = 1;
  options.mesh.rank = rank;
  options.mesh.world_size = world;
  options.mesh.listen_host = "127.0.0.1";
  options.mesh.advertise_host = "127.0.0.1";
  options.mesh.timeout = milliseconds(20000);
  options.timeout = milliseconds(20000);
  auto comm = CreateTcpMeshCommunicator(store, options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

// One rank's communicators, formed as the trainer forms them: the
// generation's, its island's, its cross group's (where it owns a shard),
// the last two seen with the generation's ranks (SubgroupCommunicator).
struct RankComms {
  IslandLayout layout;
  std::unique_ptr<Communicator> data, island, cross;
  std::unique_ptr<Communicator> island_whole, cross_whole;
  IslandComms islands() const { return IslandComms{&layout, island_whole.get(), cross_whole.get()}; }
  // What a process that ends leaves behind: closed connections.
  void Close() {
    island_whole.reset();
    cross_whole.reset();
    data.reset();
    island.reset();
    cross.reset();
  }
};

RankComms Connect(RendezvousStore& store, const std::vector<std::string>& sites, int rank) {
  RankComms comms;
  comms.layout = *LayoutIslands(Peers(sites), "site", rank);
  const IslandLayout& l = comms.layout;
  const int world = static_cast<int>(sites.size());
  comms.data = Mesh(store, "mesh/", rank, world);
  comms.island = Mesh(store, absl::StrCat("island/", l.island, "/mesh/"), l.position,
                      static_cast<int>(l.my_island().size()));
  comms.island_whole = std::make_unique<SubgroupCommunicator>(comms.island.get(), l.my_island());
  if (l.owns_shard()) {
    comms.cross = Mesh(store, absl::StrCat("cross/", l.position, "/mesh/"), l.island, static_cast<int>(l.cross.size()));
    comms.cross_whole = std::make_unique<SubgroupCommunicator>(comms.cross.get(), l.cross);
  }
  return comms;
}

void RunRanks(int world, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) threads.emplace_back([&, rank] { body(rank); });
  for (auto& t : threads) t.join();
}

// Values from a generator of their own: ranks are threads, and the
// global generator would be shared between them.
torch::Tensor Random(at::IntArrayRef sizes, uint64_t seed) {
  return at::randn(sizes, at::detail::createCPUGenerator(seed), at::kFloat);
}

// Four tensors of different sizes, the same on every rank.
std::vector<torch::Tensor> Params() {
  std::vector<torch::Tensor> params;
  uint64_t seed = 3;
  for (auto sizes : std::vector<std::vector<int64_t>>{{6, 5}, {5}, {5, 4}, {4}}) {
    params.push_back(Random(sizes, ++seed).requires_grad_(true));
  }
  return params;
}

// What rank `data_rank` trains on at `step`: a loss whose gradient is
// x + p, so the parameters' own values enter it.
torch::Tensor Loss(const std::vector<torch::Tensor>& params, int data_rank, int64_t step) {
  torch::Tensor loss = torch::zeros({});
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor x = Random(params[i].sizes(), 1000 * step + 10 * data_rank + i);
    loss = loss + (params[i] * x).sum() + 0.5 * params[i].pow(2).sum();
  }
  return loss;
}

SyncConfig Config(const std::function<void(v1::SyncSpec&)>& edit) {
  v1::SyncSpec spec;
  spec.set_mode(v1::SYNC_MODE_AVERAGE);
  spec.set_warmup_steps(0);
  spec.set_every(100);
  spec.set_islands_by("site");
  edit(spec);
  auto config = ParseSyncConfig(spec);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// One training step as the trainer runs it: the loss scaled by the rank's
// part of the samples the summed gradient covers (`covered` ranks, equal
// shares), backward with the sync armed, the update, then AfterStep.
// `before_after` sees the parameters between the update and AfterStep.
// The step as Step runs it, returning the first failure; with
// `stop_after_update` it ends after the update, as a rank whose process dies
// there would.
absl::Status TryStep(SyncStrategy& sync, torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params,
                     int data_rank, int64_t step, bool done, const std::function<void()>& before_after = nullptr,
                     bool stop_after_update = false) {
  const bool local = sync.LocalStep(step - 1);
  for (const auto& p : params) p.mutable_grad() = torch::Tensor();
  if (sync.SyncsGradients(local)) sync.ArmBackward(local);
  const double covered = static_cast<double>(sync.GradientRanks(local).size());
  (Loss(params, data_rank, step) * (1.0 / covered)).backward();
  UpdateInputs in;
  in.optimizer = &optimizer;
  in.step = step - 1;
  if (absl::Status updated = sync.Update(local, in); !updated.ok() || stop_after_update) return updated;
  if (before_after) before_after();
  StepBoundary at;
  at.step = step;
  at.done = done;
  SyncTraffic traffic;
  return sync.AfterStep(local, at, &traffic);
}

void Step(SyncStrategy& sync, torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params,
          int data_rank, int64_t step, bool done, const std::function<void()>& before_after = nullptr) {
  const absl::Status status = TryStep(sync, optimizer, params, data_rank, step, done, before_after);
  ASSERT_TRUE(status.ok()) << status;
}

// A rank's sync strategy over its comms: rounds every 2 steps, outer none.
std::unique_ptr<SyncStrategy> RoundEveryTwo(const RankComms& comms, const IslandComms& islands,
                                            const std::vector<torch::Tensor>& params) {
  auto sync = CreateSyncStrategy(Config([](v1::SyncSpec& s) { s.set_every(2); }), params, comms.data.get(), &islands);
  EXPECT_TRUE(sync.ok()) << sync.status();
  return sync.ok() ? std::move(*sync) : nullptr;
}

// The island all-reduce is bitwise what the island's ranks compute alone
// (plain all-reduce over a world of just them), and islands do not mix
// between rounds.
TEST(IslandSync, IslandStepsAreBitwiseOneIslandAlone) {
  const std::vector<std::string> sites = {"a", "a", "b", "b"};
  constexpr int kSteps = 3;
  std::map<int, torch::Tensor> in_islands, alone;
  std::mutex mu;
  InMemoryStore store;
  RunRanks(4, [&](int rank) {
    RankComms comms = Connect(store, sites, rank);
    std::vector<torch::Tensor> params = Params();
    const IslandComms islands = comms.islands();
    auto sync = CreateSyncStrategy(Config([](v1::SyncSpec&) {}), params, comms.data.get(), &islands);
    ASSERT_TRUE(sync.ok()) << sync.status();
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int64_t s = 1; s <= kSteps; ++s) Step(**sync, sgd, params, rank, s, false);
    std::lock_guard<std::mutex> lock(mu);
    in_islands[rank] = FlattenParameters(params);
  });
  // Each island alone: a world of its two ranks, plain all-reduce, the same data.
  for (int first : {0, 2}) {
    InMemoryStore own;
    RunRanks(2, [&](int r) {
      auto data = Mesh(own, "mesh/", r, 2);
      std::vector<torch::Tensor> params = Params();
      v1::SyncSpec spec;
      spec.set_mode(v1::SYNC_MODE_ALLREDUCE);
      auto sync = CreateSyncStrategy(*ParseSyncConfig(spec), params, data.get());
      ASSERT_TRUE(sync.ok()) << sync.status();
      torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1).momentum(0.9));
      for (int64_t s = 1; s <= kSteps; ++s) Step(**sync, sgd, params, first + r, s, false);
      std::lock_guard<std::mutex> lock(mu);
      alone[first + r] = FlattenParameters(params);
    });
  }
  for (int rank = 0; rank < 4; ++rank) EXPECT_TRUE(torch::equal(in_islands[rank], alone[rank])) << "rank " << rank;
  EXPECT_TRUE(torch::equal(in_islands[0], in_islands[1]));
  EXPECT_TRUE(torch::equal(in_islands[2], in_islands[3]));
  EXPECT_FALSE(torch::allclose(in_islands[0], in_islands[2]));
}

// A round leaves every rank with the flat average of the islands'
// parameters (outer none, float32 wire), uneven islands included.
void ExpectRoundIsTheIslandsAverage(const std::vector<std::string>& sites) {
  const int world = static_cast<int>(sites.size());
  std::map<int, torch::Tensor> before, after;
  std::mutex mu;
  InMemoryStore store;
  RunRanks(world, [&](int rank) {
    RankComms comms = Connect(store, sites, rank);
    std::vector<torch::Tensor> params = Params();
    const IslandComms islands = comms.islands();
    std::unique_ptr<SyncStrategy> sync = RoundEveryTwo(comms, islands, params);
    ASSERT_NE(sync, nullptr);
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
    Step(*sync, sgd, params, rank, 1, false);
    Step(*sync, sgd, params, rank, 2, false, [&] {
      std::lock_guard<std::mutex> lock(mu);
      before[rank] = FlattenParameters(params).clone();
    });
    std::lock_guard<std::mutex> lock(mu);
    after[rank] = FlattenParameters(params);
  });
  const IslandLayout layout = *LayoutIslands(Peers(sites), "site", 0);
  torch::Tensor mean = torch::zeros_like(before[0]);
  for (const auto& ranks : layout.ranks) {
    for (int r : ranks) EXPECT_TRUE(torch::equal(before[r], before[ranks[0]])) << "island member " << r;
    mean += before[ranks[0]];
  }
  mean /= static_cast<double>(layout.ranks.size());
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(torch::equal(after[r], after[0])) << "rank " << r;
    EXPECT_TRUE(torch::allclose(after[r], mean, /*rtol=*/1e-5, /*atol=*/1e-6))
        << "rank " << r << ": off the islands' average by " << (after[r] - mean).abs().max();
  }
  EXPECT_FALSE(torch::allclose(before[layout.ranks[0][0]], before[layout.ranks[1][0]]));
}

TEST(IslandSync, RoundIsTheFlatAverageOfTwoIslandsOfTwo) { ExpectRoundIsTheIslandsAverage({"a", "a", "b", "b"}); }

TEST(IslandSync, RoundIsTheFlatAverageOfUnevenIslands) {
  // Islands of 3 and 2: two shards; the third rank of "a" receives both.
  ExpectRoundIsTheIslandsAverage({"a", "a", "a", "b", "b"});
}

// Rank 3 (island b's second) ends after its update of a round's step,
// before the round: whatever collective each survivor fails in (its
// island's shard broadcast, its cross group's exchange), the failure blames
// rank 3 by its generation rank as closed, so the trainer's report leaves
// out the member that died and no other.
TEST(IslandSync, FailuresAfterARankDiedBlameItByItsGenerationRank) {
  const std::vector<std::string> sites = {"a", "a", "b", "b"};
  constexpr int kDead = 3;
  std::map<int, absl::Status> failed;
  std::mutex mu;
  InMemoryStore store;
  RunRanks(4, [&](int rank) {
    RankComms comms = Connect(store, sites, rank);
    std::vector<torch::Tensor> params = Params();
    const IslandComms islands = comms.islands();
    std::unique_ptr<SyncStrategy> sync = RoundEveryTwo(comms, islands, params);
    ASSERT_NE(sync, nullptr);
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
    Step(*sync, sgd, params, rank, 1, false);
    // Step 2 ends with a round: rank 3 updates, then its process is gone.
    const absl::Status status = TryStep(*sync, sgd, params, rank, 2, false, nullptr, /*stop_after_update=*/rank == kDead);
    sync.reset();
    comms.Close();
    std::lock_guard<std::mutex> lock(mu);
    failed[rank] = status;
  });
  // Rank 2 shares its island with rank 3, rank 1 its cross group.
  for (int rank : {1, 2}) {
    ASSERT_FALSE(failed[rank].ok()) << "rank " << rank;
    const std::optional<PeerFault> fault = PeerFaultOf(failed[rank]);
    ASSERT_TRUE(fault.has_value()) << "rank " << rank << " blames nobody: " << failed[rank];
    EXPECT_EQ(fault->rank, kDead) << "rank " << rank << ": " << failed[rank];
    EXPECT_EQ(fault->kind, PeerFaultKind::kClosed) << "rank " << rank << ": " << failed[rank];
  }
}

// Streaming rounds (2 fragments, merged a step late), int8 wire and outer
// nesterov: islands stay bitwise identical inside at every step and all
// ranks agree bitwise after the last step's full sync.
TEST(IslandSync, FragmentsInt8AndNesterovKeepIslandsIdentical) {
  const std::vector<std::string> sites = {"a", "a", "b", "b"};
  std::map<int, std::vector<torch::Tensor>> steps;
  std::map<int, torch::Tensor> initial;
  std::mutex mu;
  InMemoryStore store;
  RunRanks(4, [&](int rank) {
    RankComms comms = Connect(store, sites, rank);
    std::vector<torch::Tensor> params = Params();
    const IslandComms islands = comms.islands();
    auto sync = CreateSyncStrategy(Config([](v1::SyncSpec& s) {
                                     s.set_every(4);
                                     s.set_fragments(2);
                                     s.set_overlap_steps(1);
                                     s.set_compression(v1::COMPRESSION_INT8);
                                     s.mutable_outer()->set_kind(v1::OUTER_KIND_NESTEROV);
                                     s.mutable_outer()->set_lr(0.7);
                                     s.mutable_outer()->set_momentum(0.9);
                                   }),
                                   params, comms.data.get(), &islands);
    ASSERT_TRUE(sync.ok()) << sync.status();
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.05));
    std::vector<torch::Tensor> mine;
    for (int64_t s = 1; s <= 9; ++s) {
      Step(**sync, sgd, params, rank, s, /*done=*/s == 9);
      mine.push_back(FlattenParameters(params).clone());
    }
    std::lock_guard<std::mutex> lock(mu);
    steps[rank] = std::move(mine);
  });
  for (size_t s = 0; s < steps[0].size(); ++s) {
    EXPECT_TRUE(torch::equal(steps[0][s], steps[1][s])) << "island a, step " << s + 1;
    EXPECT_TRUE(torch::equal(steps[2][s], steps[3][s])) << "island b, step " << s + 1;
  }
  EXPECT_FALSE(torch::equal(steps[0][4], steps[2][4]));  // between rounds, islands differ
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(torch::equal(steps[r].back(), steps[0].back())) << "rank " << r;
}

// A round's side payload (overlap_steps auto's measurements) reaches every
// rank of every island as the rows of every shard owner, owner by owner,
// each in island order, whatever the wire; ranks that own no shard (the
// third of island a) are left out.
TEST(IslandRounds, SidePayloadsReachEveryRankAsEveryOwnersRows) {
  const std::vector<std::string> sites = {"a", "a", "a", "b", "b"};
  for (bool int8 : {false, true}) {
    ParameterAveragingOptions options;
    options.int8_wire = int8;
    std::map<int, std::vector<std::vector<float>>> payloads;
    std::mutex mu;
    InMemoryStore store;
    RunRanks(5, [&](int rank) {
      RankComms comms = Connect(store, sites, rank);
      std::vector<torch::Tensor> params = Params();
      auto rounds = IslandRounds::Create(params, comms.layout, comms.island.get(), comms.cross.get(), options);
      ASSERT_TRUE(rounds.ok()) << rounds.status();
      const float mark = static_cast<float>(10 * rank);
      ASSERT_TRUE((*rounds)->Launch(0, /*keep_local_steps=*/true, 1, false, {mark + 1, mark + 2}).ok());
      ASSERT_TRUE((*rounds)->Finish().ok());
      std::lock_guard<std::mutex> lock(mu);
      payloads[rank] = (*rounds)->last_round().side_payloads;
    });
    // Owners: positions 0 and 1, i.e. ranks 0 and 1 of island a, 3 and 4 of b.
    const std::vector<float> expected = {1, 2, 31, 32, 11, 12, 41, 42};
    for (int rank = 0; rank < 5; ++rank) {
      ASSERT_EQ(payloads[rank].size(), 1u) << "rank " << rank << (int8 ? " int8" : "");
      EXPECT_EQ(payloads[rank][0], expected) << "rank " << rank << (int8 ? " int8" : "");
    }
  }
}

// overlap_steps auto across islands: every rank of every island decides the
// same tau from the same measurements, so islands keep one schedule (their
// replicas stay bitwise identical inside) and all agree at the end.
TEST(IslandSync, OverlapStepsAutoDecidesTheSameTauOnEveryRank) {
  const std::vector<std::string> sites = {"a", "a", "a", "b", "b"};
  constexpr int64_t kSteps = 40;
  std::map<int, std::vector<torch::Tensor>> steps;
  std::map<int, SyncStatus> status;
  std::mutex mu;
  InMemoryStore store;
  RunRanks(5, [&](int rank) {
    RankComms comms = Connect(store, sites, rank);
    std::vector<torch::Tensor> params = Params();
    const IslandComms islands = comms.islands();
    v1::SyncSpec spec;
    spec.set_mode(v1::SYNC_MODE_AVERAGE);
    spec.set_warmup_steps(0);
    spec.set_every(4);
    spec.set_islands_by("site");
    spec.set_overlap_steps_auto(true);
    spec.set_compression(v1::COMPRESSION_INT8);
    auto config = ParseSyncConfig(spec);
    ASSERT_TRUE(config.ok()) << config.status();
    auto sync = CreateSyncStrategy(*config, params, comms.data.get(), &islands);
    ASSERT_TRUE(sync.ok()) << sync.status();
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.05));
    std::vector<torch::Tensor> mine;
    for (int64_t s = 1; s <= kSteps; ++s) {
      Step(**sync, sgd, params, rank, s, /*done=*/s == kSteps);
      mine.push_back(FlattenParameters(params).clone());
    }
    std::lock_guard<std::mutex> lock(mu);
    steps[rank] = std::move(mine);
    status[rank] = (*sync)->Status();
  });
  for (size_t s = 0; s < steps[0].size(); ++s) {
    for (int r : {1, 2}) EXPECT_TRUE(torch::equal(steps[r][s], steps[0][s])) << "island a rank " << r << " step " << s + 1;
    EXPECT_TRUE(torch::equal(steps[4][s], steps[3][s])) << "island b, step " << s + 1;
  }
  for (int r = 1; r < 5; ++r) EXPECT_TRUE(torch::equal(steps[r].back(), steps[0].back())) << "rank " << r;
  // A decision was made (it needs every owner's measured round), the same
  // one on every rank.
  EXPECT_GT(status[0].round_seconds, 0);
  for (int r = 0; r < 5; ++r) {
    EXPECT_TRUE(status[r].overlap_auto) << "rank " << r;
    EXPECT_EQ(status[r].overlap_steps, status[0].overlap_steps) << "rank " << r;
    EXPECT_EQ(status[r].round_seconds, status[0].round_seconds) << "rank " << r;
    EXPECT_EQ(status[r].step_seconds, status[0].step_seconds) << "rank " << r;
  }
}

// The outer momentum lives with the shard owners; gathered, every rank
// holds all of it, equal to what one averaging of the whole model over the
// islands computes, and it restores into another layout.
TEST(IslandRounds, OuterStateGathersWholeAndRestoresAcrossLayouts) {
  const std::vector<std::string> sites = {"a", "a", "b", "b"};
  ParameterAveragingOptions options;
  options.outer = OuterStepConfig{OuterKind::kNesterov, 0.7, 0.9};
  options.fragments = 2;
  // Round r moves island i's parameters by a value of (r, i).
  auto Move = [](std::vector<torch::Tensor>& params, int round, int island) {
    torch::NoGradGuard no_grad;
    for (size_t t = 0; t < params.size(); ++t) params[t].add_(0.01 * (1 + round) * (island + 1) + 0.001 * t);
  };
  std::map<int, std::vector<torch::Tensor>> gathered;
  std::mutex mu;
  InMemoryStore store;
  RunRanks(4, [&](int rank) {
    RankComms comms = Connect(store, sites, rank);
    std::vector<torch::Tensor> params = Params();
    auto rounds = IslandRounds::Create(params, comms.layout, comms.island.get(), comms.cross.get(), options);
    ASSERT_TRUE(rounds.ok()) << rounds.status();
    EXPECT_EQ((*rounds)->shards().size(), 2u);
    EXPECT_TRUE((*rounds)->owns_shard());
    for (int round = 0; round < 2; ++round) {
      Move(params, round, comms.layout.island);
      ASSERT_TRUE((*rounds)->Round().ok());
    }
    ASSERT_TRUE((*rounds)->GatherOuterState().ok());
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& t : (*rounds)->OuterState()) gathered[rank].push_back(t.clone());
  });
  // The reference: one averaging of all parameters over the two islands.
  std::vector<torch::Tensor> reference;
  InMemoryStore own;
  RunRanks(2, [&](int island) {
    auto comm = Mesh(own, "mesh/", island, 2);
    std::vector<torch::Tensor> params = Params();
    auto averaging = ParameterAveraging::Create(params, comm.get(), options);
    ASSERT_TRUE(averaging.ok()) << averaging.status();
    for (int round = 0; round < 2; ++round) {
      Move(params, round, island);
      ASSERT_TRUE((*averaging)->Round().ok());
    }
    if (island == 0) reference = (*averaging)->OuterStateByParameter();
  });
  ASSERT_EQ(gathered[0].size(), 4u);
  for (int r = 0; r < 4; ++r) {
    for (size_t t = 0; t < 4; ++t) {
      EXPECT_TRUE(torch::equal(gathered[r][t], gathered[0][t])) << "rank " << r << " tensor " << t;
      EXPECT_TRUE(torch::allclose(gathered[r][t], reference[t], 1e-5, 1e-7)) << "rank " << r << " tensor " << t;
    }
  }
  EXPECT_GT(gathered[0][0].abs().max().item<float>(), 0);

  // Restored where one island of three holds three shards: each owner
  // takes its part, and gathering again gives back all of it.
  InMemoryStore third;
  RunRanks(3, [&](int rank) {
    RankComms comms = Connect(third, {"c", "c", "c"}, rank);
    auto rounds = IslandRounds::Create(Params(), comms.layout, comms.island.get(), comms.cross.get(), options);
    ASSERT_TRUE(rounds.ok()) << rounds.status();
    // As a heal hands it to every rank; the gather then reads each shard
    // back from its owner's averaging.
    ASSERT_TRUE((*rounds)->RestoreOuterState(gathered[0]).ok());
    ASSERT_TRUE((*rounds)->GatherOuterState().ok());
    const auto outer = (*rounds)->OuterState();
    for (size_t t = 0; t < 4; ++t) EXPECT_TRUE(torch::equal(outer[t], gathered[0][t])) << "rank " << rank << " " << t;
    EXPECT_EQ((*rounds)->RestoreOuterState({}).code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace herd
