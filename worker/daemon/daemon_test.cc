#include "worker/daemon/daemon.h"

#include <grpcpp/grpcpp.h>
#include <prometheus/text_serializer.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/rpc_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/incarnation.h"
#include "worker/daemon/identifiers.h"
#include "worker/daemon/wait_until.h"

namespace herd::worker {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Just enough of a coordinator: records registrations and heartbeats, hands
// out whatever assignments the test sets, and drops a job's assignment once
// its trainer's exit is reported (as the real coordinator would).
class FakeCluster final : public v1::ClusterService::Service {
 public:
  grpc::Status RegisterWorker(grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      registrations_.push_back(*request);
      auto incarnation = context->client_metadata().find(kIncarnationMetadataKey);
      incarnations_.push_back(incarnation == context->client_metadata().end()
                                  ? ""
                                  : std::string(incarnation->second.data(), incarnation->second.size()));
    }
    if (hang_registrations_) {
      // A coordinator that accepted the connection and went silent.
      while (!context->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return grpc::Status::CANCELLED;
    }
    absl::MutexLock lock(&mu_);
    if (failing_registrations_ > 0) {
      --failing_registrations_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator starting");
    }
    response->set_heartbeat_interval_seconds(0.02);
    response->set_lease_seconds(lease_seconds_);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (failing_heartbeats_) {
      ++failed_heartbeats_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "network partition");
    }
    heartbeats_.push_back(*request);
    if (reregister_next_) {
      reregister_next_ = false;
      response->set_reregister(true);
      return grpc::Status::OK;
    }
    for (const v1::TrainerExit& exit : request->exits()) {
      exits_.push_back(exit);
      assignments_.erase(exit.job_id());
    }
    for (const auto& [job, assignment] : assignments_) *response->add_assignments() = assignment;
    return grpc::Status::OK;
  }

  void Assign(const std::string& job, int64_t generation) {
    absl::MutexLock lock(&mu_);
    v1::Assignment& assignment = assignments_[job];
    assignment.set_job_id(job);
    assignment.set_generation(generation);
  }
  void Unassign(const std::string& job) {
    absl::MutexLock lock(&mu_);
    assignments_.erase(job);
  }
  void ReregisterNext() {
    absl::MutexLock lock(&mu_);
    reregister_next_ = true;
  }
  void FailRegistrations(int count) {
    absl::MutexLock lock(&mu_);
    failing_registrations_ = count;
  }
  void HangRegistrations() { hang_registrations_ = true; }
  void SetLease(double seconds) {
    absl::MutexLock lock(&mu_);
    lease_seconds_ = seconds;
  }
  void FailHeartbeats(bool fail) {
    absl::MutexLock lock(&mu_);
    failing_heartbeats_ = fail;
  }

  std::vector<v1::RegisterWorkerRequest> registrations() {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  // The incarnation metadata of each registration ("" when absent).
  std::vector<std::string> incarnations() {
    absl::MutexLock lock(&mu_);
    return incarnations_;
  }
  std::vector<v1::HeartbeatRequest> heartbeats() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  std::vector<v1::TrainerExit> exits() {
    absl::MutexLock lock(&mu_);
    return exits_;
  }
  int failed_heartbeats() {
    absl::MutexLock lock(&mu_);
    return failed_heartbeats_;
  }
  // Whether the latest heartbeat listed `job` as running.
  bool LastHeartbeatRuns(const std::string& job) {
    absl::MutexLock lock(&mu_);
    if (heartbeats_.empty()) return false;
    const auto& running = heartbeats_.back().running_jobs();
    return std::find(running.begin(), running.end(), job) != running.end();
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, v1::Assignment> assignments_;
  std::vector<v1::RegisterWorkerRequest> registrations_;
  std::vector<std::string> incarnations_;
  std::vector<v1::HeartbeatRequest> heartbeats_;
  std::vector<v1::TrainerExit> exits_;
  bool reregister_next_ = false;
  int failing_registrations_ = 0;
  bool failing_heartbeats_ = false;
  std::atomic<bool> hang_registrations_{false};
  int failed_heartbeats_ = 0;
  double lease_seconds_ = 10;
};

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("daemon_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "work");

    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&cluster_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);

    supervisor_options_.work_dir = (dir_ / "work").string();
    supervisor_options_.command.trainer_binary = (dir_ / "trainer.sh").string();
    supervisor_options_.command.coordinator = address_;
    supervisor_options_.command.worker_id = "w1";
    supervisor_options_.command.insecure_no_auth = true;
    supervisor_options_.kill_grace = std::chrono::seconds(5);

    daemon_options_.worker_id = "w1";
    daemon_options_.address = "10.1.2.3";
    daemon_options_.min_backoff = std::chrono::milliseconds(10);
    daemon_options_.max_backoff = std::chrono::milliseconds(50);
    daemon_options_.reap_interval = std::chrono::milliseconds(10);
    daemon_options_.ready_file = (dir_ / "ready.json").string();
    daemon_options_.metrics_address = "127.0.0.1:12345";
  }

  void TearDown() override {
    StopDaemon();
    server_->Shutdown();
  }

  void WriteTrainer(const std::string& body) {
    std::ofstream(dir_ / "trainer.sh") << "#!/bin/sh\n"
                                       << "for a in \"$@\"; do case \"$a\" in "
                                       << "--termination-message-file=*) msg=\"${a#*=}\";; "
                                       << "--alive-file=*) alive=\"${a#*=}\";; esac; done\n"
                                       << body << "\n";
    chmod((dir_ / "trainer.sh").c_str(), 0755);
  }

  void StartDaemon() {
    supervisor_ = std::make_unique<TrainerSupervisor>(supervisor_options_, &metrics_);
    auto coordinator = LeaderChannel::Open(address_, {});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    channel_ = (*coordinator)->current();
    daemon_ = std::make_unique<Daemon>(daemon_options_, *coordinator, supervisor_.get(), &metrics_);
    daemon_thread_ = std::thread([this] { daemon_->Run(); });
  }

  void StopDaemon() {
    if (daemon_ == nullptr) return;
    daemon_->Stop();
    daemon_thread_.join();
    daemon_.reset();
  }

  std::string Metrics() {
    return prometheus::TextSerializer().Serialize(registry_.Collect());
  }

  // The value of the sample named `series` (name plus labels), or -1.
  double MetricValue(const std::string& series) {
    std::istringstream lines(Metrics());
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
    }
    return -1;
  }

  bool ExitReported(const std::string& job, int code) {
    for (const v1::TrainerExit& exit : cluster_.exits()) {
      if (exit.job_id() == job && exit.exit_code() == code) return true;
    }
    return false;
  }

  std::filesystem::path dir_;
  FakeCluster cluster_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  prometheus::Registry registry_;
  WorkerMetrics metrics_{registry_, "w1", "cpu"};
  SupervisorOptions supervisor_options_;
  DaemonOptions daemon_options_;
  std::unique_ptr<TrainerSupervisor> supervisor_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<Daemon> daemon_;
  std::thread daemon_thread_;
};

TEST_F(DaemonTest, RegistersWithItsIdentityAndWritesTheReadyFile) {
  WriteTrainer("exit 0");
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return cluster_.heartbeats().size() >= 2; }));
  v1::RegisterWorkerRequest registration = cluster_.registrations().at(0);
  EXPECT_EQ(registration.worker_id(), "w1");
  EXPECT_EQ(registration.address(), "10.1.2.3");
  EXPECT_EQ(registration.device_kind(), "cpu");
  EXPECT_EQ(registration.device_count(), 1);
  EXPECT_TRUE(IsValidIncarnation(cluster_.incarnations().at(0))) << cluster_.incarnations().at(0);
  EXPECT_EQ(cluster_.heartbeats().at(0).worker_id(), "w1");
  nlohmann::json ready = nlohmann::json::parse(std::ifstream(dir_ / "ready.json"));
  EXPECT_EQ(ready["worker_id"], "w1");
  EXPECT_EQ(ready["metrics"], "127.0.0.1:12345");
  EXPECT_EQ(MetricValue("herd_worker_registered"), 1);
  EXPECT_EQ(MetricValue("herd_worker_info{device=\"cpu\",worker=\"w1\"}"), 1);
}

TEST_F(DaemonTest, RegistersWithItsLabels) {
  daemon_options_.labels = {{"site", "us-east"}, {"pool", "a100"}};
  WriteTrainer("exit 0");
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return !cluster_.registrations().empty(); }));
  const v1::RegisterWorkerRequest registration = cluster_.registrations().at(0);
  const std::map<std::string, std::string> labels(registration.labels().begin(), registration.labels().end());
  EXPECT_EQ(labels, (std::map<std::string, std::string>{{"pool", "a100"}, {"site", "us-east"}}));
}

TEST(WorkerMetricsLabels, InfoCarriesTheLabels) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, "w1", "cpu", {{"topology.zone", "us-east-1a"}, {"pool", "a100"}});
  const std::vector<prometheus::MetricFamily> families = registry.Collect();
  auto info = std::find_if(families.begin(), families.end(),
                           [](const prometheus::MetricFamily& f) { return f.name == "herd_worker_info"; });
  ASSERT_NE(info, families.end());
  ASSERT_EQ(info->metric.size(), 1u);
  std::map<std::string, std::string> labels;
  for (const prometheus::ClientMetric::Label& label : info->metric[0].label) labels[label.name] = label.value;
  EXPECT_EQ(labels, (std::map<std::string, std::string>{{"device", "cpu"},
                                                        {"label_pool", "a100"},
                                                        {"label_topology_zone", "us-east-1a"},
                                                        {"worker", "w1"}}));
  EXPECT_EQ(info->metric[0].gauge.value, 1);
}

TEST_F(DaemonTest, ReportsATrainerExitWithItsCodeAndMessage) {
  WriteTrainer("echo \"args: $*\"; echo 'dataset not found: /data/x' > \"$msg\"; exit 3");
  cluster_.Assign("job-1", 2);
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return !cluster_.exits().empty(); }));
  v1::TrainerExit exit = cluster_.exits().at(0);
  EXPECT_EQ(exit.job_id(), "job-1");
  EXPECT_EQ(exit.generation(), 2);
  EXPECT_EQ(exit.exit_code(), 3);
  EXPECT_EQ(exit.message(), "dataset not found: /data/x");
  // Reported exactly once, and the trainer's output went to its log.
  ASSERT_TRUE(WaitUntil([&] { return cluster_.heartbeats().size() >= 5; }));
  EXPECT_EQ(cluster_.exits().size(), 1u);
  std::ifstream log(dir_ / "work" / "jobs" / "job-1" / "trainer.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("--job=job-1 --worker-id=w1"));
  EXPECT_EQ(MetricValue("herd_worker_trainer_exits_total{code=\"3\"}"), 1);
}

// A trainer lives across generations and writes each one it joins into its
// alive file. Its exit is charged to the last generation it joined: one that
// dies after its assignment moved to generation 2 but before it joined 2 did
// not fail generation 2 (charging it there made the coordinator spend a
// second restart on one failure).
TEST_F(DaemonTest, ChargesATrainerExitToTheLastGenerationItJoined) {
  for (bool joins_second : {false, true}) {
    SCOPED_TRACE(joins_second ? "joined generation 2" : "never joined generation 2");
    const std::string job = joins_second ? "job-joined" : "job-stale";
    const std::filesystem::path die = dir_ / (job + ".die");
    WriteTrainer("echo 1 > \"$alive\"; while [ ! -f " + die.string() + " ]; do sleep 0.01; done; " +
                 (joins_second ? "echo 2 > \"$alive\"; " : "") + "exit 7");
    cluster_.Assign(job, 1);
    if (daemon_ == nullptr) StartDaemon();
    ASSERT_TRUE(WaitUntil([&] { return cluster_.LastHeartbeatRuns(job); }));
    cluster_.Assign(job, 2);
    const size_t seen = cluster_.heartbeats().size();
    ASSERT_TRUE(WaitUntil([&] { return cluster_.heartbeats().size() >= seen + 3; }));  // generation 2 applied
    std::ofstream(die).put('\n');
    ASSERT_TRUE(WaitUntil([&] { return ExitReported(job, 7); }));
    for (const v1::TrainerExit& exit : cluster_.exits()) {
      if (exit.job_id() == job) {
        EXPECT_EQ(exit.generation(), joins_second ? 2 : 1);
      }
    }
  }
}

TEST_F(DaemonTest, RemovingTheAssignmentKillsTheTrainer) {
  WriteTrainer("exec sleep 1000");
  cluster_.Assign("job-1", 1);
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return cluster_.LastHeartbeatRuns("job-1"); }));
  EXPECT_EQ(MetricValue("herd_worker_trainers_running"), 1);
  cluster_.Unassign("job-1");
  ASSERT_TRUE(WaitUntil([&] { return ExitReported("job-1", -SIGTERM); }));
  ASSERT_TRUE(WaitUntil([&] { return cluster_.heartbeats().back().running_jobs().empty(); }));
  EXPECT_EQ(MetricValue("herd_worker_trainers_running"), 0);
  EXPECT_EQ(MetricValue("herd_worker_trainer_exits_total{code=\"signal_15\"}"), 1);
}

TEST_F(DaemonTest, RegistersAgainWhenAsked) {
  WriteTrainer("exit 0");
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return !cluster_.heartbeats().empty(); }));
  EXPECT_EQ(cluster_.registrations().size(), 1u);
  cluster_.ReregisterNext();
  ASSERT_TRUE(WaitUntil([&] { return cluster_.registrations().size() >= 2; }));
  size_t heartbeats = cluster_.heartbeats().size();
  // And heartbeats resume afterwards.
  ASSERT_TRUE(WaitUntil([&] { return cluster_.heartbeats().size() > heartbeats; }));
  EXPECT_EQ(cluster_.registrations().size(), 2u);
  // The same process: the coordinator must not take it for a restart.
  EXPECT_EQ(cluster_.incarnations().at(1), cluster_.incarnations().at(0));
}

TEST_F(DaemonTest, RetriesRegistrationWhileTheCoordinatorFails) {
  WriteTrainer("exit 0");
  cluster_.FailRegistrations(3);
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return !cluster_.heartbeats().empty(); }));
  EXPECT_EQ(cluster_.registrations().size(), 4u);
}

TEST_F(DaemonTest, RetriesRegistrationUntilTheCoordinatorIsUp) {
  // Nothing listens here yet: grab a free port, then release it.
  int port = 0;
  {
    FakeCluster placeholder;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&placeholder);
    builder.BuildAndStart()->Shutdown();
  }
  address_ = "127.0.0.1:" + std::to_string(port);
  WriteTrainer("exit 0");
  StartDaemon();
  // A connection attempt has failed: the daemon is in its retry loop.
  ASSERT_TRUE(WaitUntil([&] { return channel_->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE; }));
  EXPECT_EQ(MetricValue("herd_worker_registered"), 0);
  FakeCluster late;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
  builder.RegisterService(&late);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return !late.heartbeats().empty(); }, std::chrono::seconds(20)));
  StopDaemon();
  server->Shutdown();
}

TEST_F(DaemonTest, StopDoesNotWaitForASilentCoordinator) {
  WriteTrainer("exit 0");
  cluster_.HangRegistrations();
  daemon_options_.rpc_timeout = std::chrono::seconds(60);
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return !cluster_.registrations().empty(); }));
  auto start = std::chrono::steady_clock::now();
  StopDaemon();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(DaemonTest, TrainersKeepRunningWhileHeartbeatsFail) {
  WriteTrainer("exec sleep 1000");
  cluster_.Assign("job-1", 1);
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return cluster_.LastHeartbeatRuns("job-1"); }));
  cluster_.FailHeartbeats(true);
  ASSERT_TRUE(WaitUntil([&] { return cluster_.failed_heartbeats() >= 3; }));
  EXPECT_THAT(supervisor_->RunningJobs(), Contains("job-1"));
  EXPECT_THAT(cluster_.exits(), IsEmpty());
  // The server counts a failure before the daemon sees it.
  EXPECT_TRUE(WaitUntil([&] { return MetricValue("herd_worker_heartbeat_failures_total") >= 3; }));
  cluster_.FailHeartbeats(false);
  size_t heartbeats = cluster_.heartbeats().size();
  ASSERT_TRUE(WaitUntil([&] { return cluster_.heartbeats().size() > heartbeats; }));
  EXPECT_TRUE(cluster_.LastHeartbeatRuns("job-1"));
}

// While the coordinator is unreachable, retries stay within a quarter lease
// however far the backoff has grown: a long backoff would outlast the lease
// and get a healthy worker declared dead.
TEST_F(DaemonTest, HeartbeatRetriesStayInsideTheLease) {
  WriteTrainer("exit 0");
  cluster_.SetLease(0.8);  // retries at most 0.2 s apart
  daemon_options_.min_backoff = std::chrono::milliseconds(100);
  daemon_options_.max_backoff = std::chrono::seconds(5);
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return !cluster_.heartbeats().empty(); }));
  cluster_.FailHeartbeats(true);
  ASSERT_TRUE(WaitUntil([&] { return cluster_.failed_heartbeats() >= 1; }));
  const int before = cluster_.failed_heartbeats();
  // Ten more retries within 3 s: capped at 0.2 s apart they take about 2 s;
  // uncapped (0.1, 0.2, 0.4, 0.8, 1.6 s) there are 5. Waited for, so it ends
  // as soon as they arrive. This checks that the daemon applies the lease cap;
  // the cap itself is tested exactly in backoff_test (RetryDelayWithinLease).
  EXPECT_TRUE(WaitUntil([&] { return cluster_.failed_heartbeats() - before >= 10; }, std::chrono::seconds(3)))
      << cluster_.failed_heartbeats() - before << " retries";
  cluster_.FailHeartbeats(false);
}

TEST_F(DaemonTest, StopTerminatesTrainersAndReportsTheirExits) {
  WriteTrainer("exec sleep 1000");
  cluster_.Assign("job-1", 1);
  StartDaemon();
  ASSERT_TRUE(WaitUntil([&] { return cluster_.LastHeartbeatRuns("job-1"); }));
  StopDaemon();
  EXPECT_THAT(supervisor_->RunningJobs(), IsEmpty());
  EXPECT_TRUE(ExitReported("job-1", -SIGTERM));
  EXPECT_EQ(MetricValue("herd_worker_registered"), 0);
}

}  // namespace
}  // namespace herd::worker
