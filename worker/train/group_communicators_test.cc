// The communicators of an islands job (sync.islands_by) form at the same
// time: a rank's island and cross group do not wait for the generation's
// own mesh, so a re-form costs the slowest of the three, not their sum.
#include "worker/train/group_communicators.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "common/job_spec.h"
#include "worker/comm/tcp_mesh_formation.h"
#include "worker/train/report/progress_reporter.h"
#include "worker/train/testing/in_process_coordinator.h"
#include "worker/train/training_context.h"

namespace herd {
namespace {

constexpr char kJob[] = "job-1";
constexpr int kTimeoutSeconds = 20;

v1::JobSpec IslandsSpec() {
  v1::JobSpec spec;
  spec.set_name("islands");
  spec.mutable_model()->set_name("mlp");
  spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_samples(256);
  spec.mutable_dataset()->set_synthetic_features(16);
  spec.mutable_dataset()->set_synthetic_classes(4);
  spec.set_batch_size(16);
  spec.set_collective_timeout_seconds(kTimeoutSeconds);
  spec.mutable_optimizer()->set_name(v1::OPTIMIZER_NAME_SGD);
  spec.mutable_optimizer()->set_lr(0.05);
  spec.mutable_sync()->set_mode(v1::SYNC_MODE_AVERAGE);
  spec.mutable_sync()->set_islands_by("site");
  spec.mutable_sync()->set_same_host_transport(v1::SAME_HOST_TRANSPORT_TCP);
  ApplyJobDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

// Rank `rank` of generation 1 of four ranks in islands a (0, 1) and b (2, 3).
v1::JoinGenerationResponse JoinOf(const v1::JobSpec& spec, int rank) {
  const std::vector<std::string> workers = {"a0", "a1", "b0", "b1"};
  v1::JoinGenerationResponse join;
  join.set_generation(1);
  join.set_rank(rank);
  join.set_world_size(static_cast<int64_t>(workers.size()));
  *join.mutable_spec() = spec;
  join.set_seed(7);
  for (size_t i = 0; i < workers.size(); ++i) {
    v1::Peer* peer = join.add_peers();
    peer->set_rank(static_cast<int64_t>(i));
    peer->set_worker_id(workers[i]);
    peer->set_address("127.0.0.1");
    (*peer->mutable_labels())["site"] = workers[i].substr(0, 1);
  }
  return join;
}

// Ranks 0 and 2 (position 0 of islands a and b: one cross group) arrive,
// their island-mates 1 and 3 never do. The generation's mesh waits for them
// until its timeout, and the islands' meshes cannot form either; the cross
// group of 0 and 2 needs neither, and starts (its ranks publish where they
// listen) while they wait. One after another, it would have started only
// after the generation's mesh failed, i.e. never: the failure returns first.
TEST(GroupCommunicators, AnIslandsRanksCrossGroupFormsWhileTheGenerationsMeshWaits) {
  const v1::JobSpec spec = IslandsSpec();
  InProcessCoordinator coordinator(kJob, spec, 7);
  const std::filesystem::path root = std::filesystem::path(::testing::TempDir()) / "group_communicators_test";
  std::map<int, absl::Status> ended;
  std::vector<std::thread> ranks;
  std::mutex mu;
  for (int rank : {0, 2}) {
    ranks.emplace_back([&, rank] {
      const v1::JoinGenerationResponse join = JoinOf(spec, rank);
      auto link = coordinator.Link(join.peers(rank).worker_id());
      ProgressReporter reporter(link.get(), nullptr);
      TrainerOptions options;
      options.job_id = kJob;
      options.work_dir = (root / join.peers(rank).worker_id()).string();
      std::filesystem::create_directories(options.work_dir);
      auto context = TrainingContext::Create(spec, 7, options, nullptr, nullptr, &reporter);
      absl::Status status = context.status();
      if (context.ok()) status = CreateGroupCommunicators(join, **context, link.get()).status();
      std::lock_guard<std::mutex> lock(mu);
      ended[rank] = status;
    });
  }
  // Rank 0 of the cross group (generation rank 0) listens for rank 2 there.
  std::shared_ptr<RendezvousStore> store = coordinator.Link("a0")->KvStore(1);
  std::string address;
  const absl::Status published = store->Get(TcpMeshAddressStoreKey("cross/0/mesh/", 0),
                                            std::chrono::seconds(kTimeoutSeconds / 2), &address);
  EXPECT_TRUE(published.ok()) << "the cross group did not start while the generation's mesh waited: " << published;
  for (std::thread& rank : ranks) rank.join();
  // The generation's own failure is the one returned, as before: it names
  // a rank of the generation that did not arrive, not a subgroup's.
  for (int rank : {0, 2}) {
    ASSERT_FALSE(ended[rank].ok()) << rank;
    EXPECT_EQ(ended[rank].code(), absl::StatusCode::kDeadlineExceeded) << rank << ": " << ended[rank];
    EXPECT_NE(std::string(ended[rank].message()).rfind("island ", 0), 0u) << rank << ": " << ended[rank];
    EXPECT_NE(std::string(ended[rank].message()).rfind("cross group ", 0), 0u) << rank << ": " << ended[rank];
  }
}

}  // namespace
}  // namespace herd
