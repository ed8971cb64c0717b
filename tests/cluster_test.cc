// Foundation end to end: a real coordinator, two real worker daemons and their
// trainer processes on loopback, driven through the real `herd` CLI.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <thread>

#include "common/grpc_serving.h"
#include "common/rpc_options.h"
#include "proto/herd.grpc.pb.h"
#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

ClusterOptions NoWorkers() {
  ClusterOptions options;
  options.workers = 0;
  return options;
}

constexpr char kSmallJob[] = R"(
name: two-ranks
model: mlp
dataset: {kind: synthetic, synthetic_samples: 512, synthetic_features: 32}
batch_size: 16
max_steps: 12
min_workers: 2
max_workers: 2
log_interval_steps: 4
optimizer: {lr: 0.05, scale_lr: linear}
)";

TEST(Cluster, TwoWorkersTrainAsRanksOfOneGeneration) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(kSmallJob);
  ASSERT_FALSE(id.empty());
  auto job = cluster.WaitForState(id, {"SUCCEEDED", "FAILED", "CANCELLED"}, seconds(120));
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump(2) << cluster.Logs();
  EXPECT_EQ(job.value("generation", 0), 1);
  EXPECT_EQ(job.value("world_size", 0), 2);
  EXPECT_EQ(job.value("step", 0), 12);
  // Ranks follow the member order the coordinator chose.
  ASSERT_EQ(job["workers"].size(), 2u);
  EXPECT_EQ(job["workers"][0], "worker-0");
  EXPECT_EQ(job["workers"][1], "worker-1");
  // Each trainer learned its rank from the rendezvous and connected to its
  // peer through addresses exchanged in the coordinator's key-value store.
  EXPECT_NE(ReadFile(cluster.job_dir(0, id) + "/trainer.log").find("rank 0/2 generation 1"), std::string::npos);
  EXPECT_NE(ReadFile(cluster.job_dir(1, id) + "/trainer.log").find("rank 1/2 generation 1"), std::string::npos);
  // optimizer.scale_lr linear at world size 2: the trainers stepped at 2 x lr
  // and said so; the job shows the rate of its last step.
  EXPECT_DOUBLE_EQ(job.value("learning_rate", 0.0), 0.1);
  EXPECT_NE(ReadFile(cluster.job_dir(0, id) + "/trainer.log").find("learning rate 0.1 = 0.05 scaled linear at world size 2"),
            std::string::npos);

  // Both workers are free again and `herd list` shows the job.
  EXPECT_TRUE(cluster.WaitForAliveWorkers(2, seconds(10)));
  auto list = cluster.HerdJson({"list"});
  ASSERT_EQ(list["jobs"].size(), 1u);
  EXPECT_EQ(list["jobs"][0]["id"], id);
  EXPECT_EQ(list["jobs"][0]["state"], "SUCCEEDED");
}

TEST(Cluster, CancelStopsTrainersAndFreesWorkers) {
  LocalCluster cluster;
  const std::string id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 100000}
batch_size: 8
epochs: 100
min_workers: 2
)");
  auto running = cluster.WaitForState(id, {"RUNNING"}, seconds(60));
  ASSERT_EQ(running.value("state", ""), "RUNNING");
  CommandResult cancel = cluster.Herd({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  auto job = cluster.WaitForState(id, {"CANCELLED"}, seconds(30));
  EXPECT_EQ(job.value("state", ""), "CANCELLED");
  // The daemons stop the trainers and the workers become IDLE again.
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  bool idle = false;
  while (!idle && std::chrono::steady_clock::now() < deadline) {
    auto workers = cluster.HerdJson({"workers"});
    idle = workers["workers"].size() == 2;
    for (const auto& w : workers["workers"]) idle = idle && w.value("state", "") == "IDLE";
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(idle) << cluster.Logs();
  // Cancelling again is refused with a reason.
  CommandResult again = cluster.Herd({"cancel", id});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("CANCELLED"), std::string::npos) << again.err;
}

TEST(Cluster, CoordinatorRestartKeepsJobsAndWorkersReregister) {
  LocalCluster cluster;
  // Needs 3 workers, so it stays PENDING across the restart.
  const std::string pending = cluster.Submit("model: mlp\ndataset: {kind: synthetic}\nbatch_size: 4\nmin_workers: 3\n");
  const std::string done = cluster.Submit(kSmallJob);
  auto finished = cluster.WaitForState(done, {"SUCCEEDED", "FAILED"}, seconds(120));
  ASSERT_EQ(finished.value("state", ""), "SUCCEEDED") << cluster.Logs();

  cluster.StopCoordinator(SIGKILL);
  cluster.StartCoordinator();

  auto list = cluster.HerdJson({"list"});
  ASSERT_EQ(list["jobs"].size(), 2u) << list.dump(2);
  std::map<std::string, std::string> states;
  for (const auto& j : list["jobs"]) states[j["id"]] = j["state"];
  EXPECT_EQ(states[pending], "PENDING");
  EXPECT_EQ(states[done], "SUCCEEDED");
  auto job = cluster.HerdJson({"status", done});
  EXPECT_EQ(job.value("step", 0), 12);
  // Both daemons find the restarted coordinator and keep heartbeating.
  const double restarted_at = static_cast<double>(time(nullptr));
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  bool fresh = false;
  while (!fresh && std::chrono::steady_clock::now() < deadline) {
    auto workers = cluster.HerdJson({"workers"});
    int count = 0;
    for (const auto& w : workers["workers"]) {
      if (w.value("last_heartbeat_unix", 0.0) >= restarted_at - 1 && w.value("state", "") == "IDLE") ++count;
    }
    fresh = count == 2;
    if (!fresh) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(fresh) << cluster.Logs();
}

TEST(Cluster, RequestsWithoutTheTokenAreRefused) {
  LocalCluster cluster(NoWorkers());
  // No token at all.
  CommandResult anonymous = RunCommand({LocalCluster::Binary("client/herd"), "list", "--coordinator", cluster.address()},
                                       seconds(20), {"HERD_TOKEN_FILE="});
  EXPECT_EQ(anonymous.exit_code, 1);
  EXPECT_NE(anonymous.err.find("UNAUTHENTICATED"), std::string::npos) << anonymous.err;
  // A wrong token.
  const std::string wrong = cluster.root() + "/wrong-token";
  WritePrivateFile(wrong, "not-the-token\n");
  CommandResult bad = RunCommand({LocalCluster::Binary("client/herd"), "list", "--coordinator", cluster.address(),
                                  "--token-file", wrong},
                                 seconds(20));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("UNAUTHENTICATED"), std::string::npos) << bad.err;
  // The right token works.
  EXPECT_EQ(cluster.Herd({"list"}).exit_code, 0);
}

TEST(Cluster, InvalidJobSpecIsRefusedNamingTheField) {
  LocalCluster cluster(NoWorkers());
  const std::string path = cluster.root() + "/bad.yaml";
  std::ofstream(path) << "model: mlp\ndataset: {kind: synthetic}\nbatch_size: 0\n";
  // The CLI checks the spec with the coordinator's own validator before
  // sending it (exit 2, bad job file); coordinator/service_test covers the
  // server refusing the same spec with INVALID_ARGUMENT.
  CommandResult result = cluster.Herd({"submit", path});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("batch_size: must be > 0"), std::string::npos) << result.err;
  std::ofstream(path) << "model: gpt9\ndataset: {kind: synthetic}\nbatch_size: 4\n";
  result = cluster.Herd({"submit", path});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("model.name: unknown value 'gpt9'"), std::string::npos) << result.err;
  // Nothing was stored.
  EXPECT_EQ(cluster.HerdJson({"list"})["jobs"].size(), 0u);
}

// Two coordinators would schedule the same workers: a second one on the same
// port or the same state dir exits at once, naming why; the first serves on.
TEST(Cluster, SecondCoordinatorIsRefused) {
  LocalCluster cluster(NoWorkers());
  const std::string coordinator = LocalCluster::Binary("coordinator/herd-coordinator");
  CommandResult same_port = RunCommand({coordinator, "--listen=" + cluster.address(), "--metrics-listen=",
                                        "--state-dir=" + cluster.root() + "/other-state", "--insecure-no-auth"},
                                       seconds(20));
  EXPECT_EQ(same_port.exit_code, 1) << same_port.err;
  EXPECT_NE(same_port.err.find("cannot listen on " + cluster.address()), std::string::npos) << same_port.err;
  CommandResult same_state = RunCommand({coordinator, "--listen=127.0.0.1:0", "--metrics-listen=",
                                         "--state-dir=" + cluster.root() + "/state", "--insecure-no-auth"},
                                        seconds(20));
  EXPECT_EQ(same_state.exit_code, 1) << same_state.err;
  EXPECT_NE(same_state.err.find("is in use by another coordinator"), std::string::npos) << same_state.err;
  EXPECT_EQ(cluster.Herd({"list"}).exit_code, 0);
}

// herd-worker --health-listen serves grpc.health.v1: SERVING once registered
// (readiness), NOT_SERVING while it cannot reach the coordinator (but it
// answers: alive), and its status for operators.
TEST(Cluster, WorkerHealthFollowsRegistration) {
  LocalCluster cluster(NoWorkers());
  auto start_worker = [&](const std::string& id, const std::string& coordinator, int health_port) {
    return std::make_unique<Process>(
        std::vector<std::string>{LocalCluster::Binary("worker/daemon/herd-worker"), "--coordinator=" + coordinator,
                                 "--worker-id=" + id, "--work-dir=" + cluster.root() + "/" + id, "--metrics-listen=",
                                 "--health-listen=127.0.0.1:" + std::to_string(health_port),
                                 "--token-file=" + cluster.credentials().worker_token_file,
                                 "--trainer-binary=" + LocalCluster::Binary("worker/train/herd-trainer"),
                                 "--ready-file=" + cluster.root() + "/" + id + ".json"},
        cluster.root() + "/" + id + ".log");
  };
  auto wait_health = [](int port, bool serving) {
    auto channel = MakeChannel("127.0.0.1:" + std::to_string(port));
    const auto deadline = std::chrono::steady_clock::now() + seconds(30);
    absl::StatusOr<bool> health = absl::UnavailableError("not asked yet");
    while (std::chrono::steady_clock::now() < deadline) {
      health = CheckHealth(*channel, "", seconds(2));
      if (health.ok() && *health == serving) return health;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return health;
  };

  const int lonely_port = LocalCluster::FreeLocalPort();
  auto lonely = start_worker("worker-lonely", "127.0.0.1:" + std::to_string(LocalCluster::FreeLocalPort()), lonely_port);
  auto unready = wait_health(lonely_port, false);
  ASSERT_TRUE(unready.ok()) << unready.status() << cluster.Logs();
  EXPECT_FALSE(*unready);

  const int port = LocalCluster::FreeLocalPort();
  auto worker = start_worker("worker-probed", cluster.address(), port);
  ASSERT_TRUE(WaitForFile(cluster.root() + "/worker-probed.json", seconds(30))) << cluster.Logs();
  auto ready = wait_health(port, true);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(*ready);
  auto stub = v1::WorkerService::NewStub(*MakeChannel("127.0.0.1:" + std::to_string(port)));
  grpc::ClientContext context;
  v1::GetWorkerStatusResponse status;
  ASSERT_TRUE(stub->GetWorkerStatus(&context, v1::GetWorkerStatusRequest(), &status).ok());
  EXPECT_EQ(status.worker_id(), "worker-probed");
  EXPECT_TRUE(status.registered());
  lonely->Signal(SIGTERM);
  worker->Signal(SIGTERM);
  EXPECT_TRUE(lonely->Wait(seconds(15)).has_value());
  EXPECT_TRUE(worker->Wait(seconds(15)).has_value());
}

}  // namespace
}  // namespace herd::testing
