// Two herd-coordinator processes on one real etcd (--store=etcd://): one
// leads and serves, the other waits as a standby and answers every call
// with the leader's address. The leader is frozen (SIGSTOP) past its lease:
// the standby leads and serves the jobs the first one accepted; the frozen
// one, woken, finds its lease gone and exits 3. A leader stopped with
// SIGTERM resigns, so a standby need not wait out the lease.
//
// With three etcd members, real workers and the CLI given both coordinators'
// addresses: a killed leader is replaced within 5 s and the job goes on
// from its recorded checkpoints; with all of etcd down, submits fail with
// UNAVAILABLE naming etcd while training goes on, and all recovers when etcd
// is back. Killing etcd's own Raft leader is only a pause: the job stays in
// its generation and trains on, and its checkpoints are recorded again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <nlohmann/json.hpp>

#include "absl/strings/str_join.h"
#include "common/grpc_serving.h"
#include "common/leader_redirect.h"
#include "common/rpc_options.h"
#include "coordinator/etcd/leadership.h"
#include "coordinator/etcd/local_etcd.h"
#include "proto/herd.grpc.pb.h"
#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/process.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

// The newest checkpoint step the coordinator recorded for the job (-1: none).
int64_t RecordedStep(LocalCluster& cluster, const std::string& job_id) {
  CommandResult listed = cluster.Herd({"checkpoints", job_id, "-o", "json"});
  if (listed.exit_code != 0) return -1;
  auto json = nlohmann::json::parse(listed.out, nullptr, false);
  int64_t newest = -1;
  if (json.is_discarded()) return newest;
  for (const auto& checkpoint : json.value("checkpoints", nlohmann::json::array())) {
    const auto& step = checkpoint["step"];  // proto JSON writes int64 as a string
    newest = std::max<int64_t>(newest, step.is_string() ? std::stoll(step.get<std::string>()) : step.get<int64_t>());
  }
  return newest;
}

class CoordinatorFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!coordinator::LocalEtcd::Installed()) {
      GTEST_SKIP() << coordinator::kEtcdBinary << " is missing: install Debian's etcd-server (scripts/setup.sh does)";
    }
    root_ = ::testing::TempDir() + "/failover";
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }

  void StartEtcd(int members) {
    auto etcd = coordinator::LocalEtcd::Start(members);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }

  std::string Store() const { return "etcd://" + absl::StrJoin(etcd_->endpoints(), ","); }

  // A coordinator on the etcd store; its ready file appears once it answers
  // (as a standby: "leading": false) and says "leading": true once it leads.
  std::unique_ptr<Process> StartCoordinator(const std::string& name, const std::string& listen = "127.0.0.1:0",
                                            const std::string& auth = "--insecure-no-auth", int lease_seconds = 2) {
    std::filesystem::remove(Ready(name));
    return std::make_unique<Process>(
        std::vector<std::string>{LocalCluster::Binary("coordinator/herd-coordinator"), "--store=" + Store(),
                                 "--etcd-lease-seconds=" + std::to_string(lease_seconds), "--listen=" + listen,
                                 "--metrics-listen=", auth,
                                 "--ready-file=" + Ready(name)},
        root_ + "/" + name + "." + std::to_string(++started_) + ".log");
  }

  std::string Ready(const std::string& name) const { return root_ + "/" + name + ".json"; }

  std::string Address(const std::string& name) const {
    return nlohmann::json::parse(ReadFile(Ready(name)))["listen"].get<std::string>();
  }

  // Polls the ready file until it says `leading` (false: answers as a standby).
  bool WaitForLeading(const std::string& name, bool leading, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::filesystem::exists(Ready(name))) {
        auto ready = nlohmann::json::parse(ReadFile(Ready(name)), nullptr, false);
        if (!ready.is_discarded() && ready.value("leading", !leading) == leading) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  CommandResult Herd(const std::string& name, std::vector<std::string> args) {
    args.insert(args.begin(), LocalCluster::Binary("client/herd"));
    args.insert(args.end(), {"--coordinator", Address(name)});
    return RunCommand(args, seconds(30), {"HERD_TOKEN_FILE="});
  }

  // Three etcd members; a LocalCluster of two workers whose coordinator "a"
  // (at a_address_) leads; and "b" (at b_address_) answering as its
  // standby. The workers and the cluster's CLI know both addresses; the
  // trainers write their sample ledgers under ledger_dir_.
  void StartClusterWithStandby() {
    ASSERT_NO_FATAL_FAILURE(StartEtcd(3));
    a_address_ = "127.0.0.1:" + std::to_string(LocalCluster::FreeLocalPort());
    b_address_ = "127.0.0.1:" + std::to_string(LocalCluster::FreeLocalPort());
    ledger_dir_ = NewLedgerDir();
    ClusterOptions options;
    options.workers = 2;
    options.coordinator_port = std::stoi(a_address_.substr(a_address_.rfind(':') + 1));
    options.store = Store();
    // 3 s: a standby leads 2-3 s after the leader dies (well inside 5 s), and a
    // leader cut off from etcd keeps leading for 2 s at least, time enough for
    // the submit that finds etcd gone.
    options.coordinator_args = {"--etcd-lease-seconds=3"};
    options.coordinator_addresses = a_address_ + "," + b_address_;
    options.worker_env = {std::string(kSampleLedgerDirEnv) + "=" + ledger_dir_};
    cluster_ = std::make_unique<LocalCluster>(options);  // coordinator "a" leads
    b_ = StartStandby();
    ASSERT_TRUE(WaitForLeading("b", false, seconds(30))) << b_->Log();
  }

  // Coordinator "b" on b_address_, with the cluster's credentials.
  std::unique_ptr<Process> StartStandby() {
    return StartCoordinator("b", b_address_, "--auth-file=" + cluster_->credentials().auth_file, 3);
  }

  struct TrainingJob {
    std::string id;
    nlohmann::json running;  // the job once it recorded `recorded`
    int64_t recorded = -1;   // a checkpoint step the coordinator recorded
  };

  // A job of both workers, once it has recorded a checkpoint at step 20 or later.
  void SubmitTrainingJob(TrainingJob* job) {
    LocalCluster& cluster = *cluster_;
    job->id = cluster.Submit(R"(
model: mlp
dataset: {kind: synthetic, synthetic_samples: 1000000, synthetic_features: 16}
batch_size: 16
optimizer: {name: sgd, lr: 0.01}
log_interval_steps: 5
min_workers: 2
max_workers: 2
checkpoint: {interval_steps: 10}
seed: 5
)");
    ASSERT_FALSE(job->id.empty()) << cluster.Logs();
    job->running = WaitForJob(
        cluster, job->id,
        [&](const auto& j) { return Field(j, "world_size") == 2 && RecordedStep(cluster, job->id) >= 20; },
        seconds(120));
    job->recorded = RecordedStep(cluster, job->id);
    ASSERT_GE(job->recorded, 20) << job->running.dump(2) << cluster.Logs();
  }

  std::unique_ptr<coordinator::LocalEtcd> etcd_;
  std::string root_;
  int started_ = 0;
  // StartClusterWithStandby's; declared after etcd_, so they stop before it.
  std::string a_address_;
  std::string b_address_;
  std::string ledger_dir_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<Process> b_;
};

TEST_F(CoordinatorFailoverTest, AFrozenLeaderIsReplacedAndStepsDownWhenItWakes) {
  StartEtcd(1);
  auto a = StartCoordinator("a");
  ASSERT_TRUE(WaitForLeading("a", true, seconds(30))) << a->Log();
  auto b = StartCoordinator("b");
  const std::string spec = root_ + "/job.yaml";
  {
    std::ofstream out(spec);
    out << "name: failover\nmodel: {name: mlp}\ndataset: {kind: synthetic}\nbatch_size: 8\n";
  }
  CommandResult submitted = Herd("a", {"submit", spec});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;
  const std::string job_id = submitted.out.substr(0, submitted.out.find('\n'));
  ASSERT_FALSE(job_id.empty());
  // The standby answers, but does not lead while the leader leads.
  ASSERT_TRUE(WaitForLeading("b", false, seconds(30))) << b->Log();

  a->Signal(SIGSTOP);
  ASSERT_TRUE(WaitForLeading("b", true, seconds(30))) << b->Log();
  CommandResult listed = Herd("b", {"list"});
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find(job_id), std::string::npos) << listed.out;

  a->Signal(SIGCONT);
  std::optional<int> a_exit = a->Wait(seconds(30));
  ASSERT_TRUE(a_exit.has_value()) << a->Log();
  EXPECT_EQ(*a_exit, 3) << a->Log();
  EXPECT_NE(a->Log().find("lost the etcd leadership"), std::string::npos) << a->Log();

  // A graceful stop resigns: the key is gone at once, not after the lease.
  auto client = coordinator::EtcdClient::Connect(etcd_->endpoints());
  ASSERT_TRUE(client.ok());
  b->Signal(SIGTERM);
  std::optional<int> b_exit = b->Wait(seconds(30));
  ASSERT_TRUE(b_exit.has_value()) << b->Log();
  EXPECT_EQ(*b_exit, 0) << b->Log();
  EXPECT_EQ(*coordinator::EtcdLeadership::CurrentLeader(**client, "/herd/leader"), "");
}


// Bytes the trainers wrote to their sample ledgers: grows while they train.
size_t LedgerBytes(const std::string& dir) {
  size_t bytes = 0;
  for (const std::string& ledger : ReadLedgers(dir)) bytes += ledger.size();
  return bytes;
}

bool WaitUntil(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

TEST_F(CoordinatorFailoverTest, WorkersAndTheCliGivenBothAddressesFollowTheLeaderThroughFailoverAndAnEtcdOutage) {
  ASSERT_NO_FATAL_FAILURE(StartClusterWithStandby());
  LocalCluster& cluster = *cluster_;
  const std::string& a_address = a_address_;
  const std::string& b_address = b_address_;
  std::unique_ptr<Process>& b = b_;

  // The follower answers every service with the leader's address.
  auto channel = MakeChannel(b_address);
  ASSERT_TRUE(channel.ok());
  {
    grpc::ClientContext context;
    v1::ListJobsResponse jobs;
    grpc::Status status = v1::JobService::NewStub(*channel)->ListJobs(&context, {}, &jobs);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(status.error_message(), "not the leader; the leader is " + a_address);
    EXPECT_EQ(LeaderHint(context), a_address);
  }
  {
    grpc::ClientContext context;
    v1::HeartbeatResponse heartbeat;
    grpc::Status status = v1::ClusterService::NewStub(*channel)->Heartbeat(&context, {}, &heartbeat);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_EQ(LeaderHint(context), a_address);
  }
  EXPECT_FALSE(CheckHealth(*channel, "", std::chrono::seconds(5)).ok());  // a readiness probe: not ready
  auto alive = CheckHealth(*channel, kLivenessService, std::chrono::seconds(5));  // a liveness probe: alive
  EXPECT_TRUE(alive.ok() && *alive) << alive.status();
  // The CLI given the follower alone follows it to the leader.
  CommandResult via_follower = cluster.Herd({"workers", "--coordinator", b_address});
  EXPECT_EQ(via_follower.exit_code, 0) << via_follower.err;

  TrainingJob job;
  ASSERT_NO_FATAL_FAILURE(SubmitTrainingJob(&job));
  const std::string& id = job.id;
  const nlohmann::json& running = job.running;
  const int64_t recorded = job.recorded;

  // Kill the leader: the standby leads within 5 s; the job goes on past
  // what was recorded, and that record is still there.
  cluster.StopCoordinator(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitForLeading("b", true, seconds(30))) << b->Log();
  const double takeover = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LE(takeover, 5.0) << b->Log();
  std::cout << "the standby led " << takeover << " s after the leader was killed\n";
  auto leader_alive = CheckHealth(*channel, kLivenessService, std::chrono::seconds(5));
  EXPECT_TRUE(leader_alive.ok() && *leader_alive) << leader_alive.status();
  EXPECT_TRUE(CheckHealth(*channel, "", std::chrono::seconds(5)).value_or(false));  // ready: it leads
  auto [after, seconds_to_progress] = WaitForProgressOn(cluster, id, 2, Field(running, "step"), seconds(60));
  EXPECT_EQ(after.value("state", ""), "RUNNING") << after.dump(2) << cluster.Logs();
  EXPECT_GT(Field(after, "step"), Field(running, "step")) << cluster.Logs();
  EXPECT_GE(RecordedStep(cluster, id), recorded);

  // All of etcd goes: a submit fails with UNAVAILABLE naming etcd, and
  // nothing stops the trainers.
  for (int i = 0; i < 3; ++i) etcd_->Kill(i);
  const size_t ledger_before = LedgerBytes(ledger_dir_);
  const std::string spec = root_ + "/second.yaml";
  std::ofstream(spec) << "model: mlp\ndataset: {kind: synthetic}\nbatch_size: 8\n";
  CommandResult refused = cluster.Herd({"submit", spec});
  EXPECT_EQ(refused.exit_code, 3) << refused.out << refused.err;  // the CLI's exit code for UNAVAILABLE
  EXPECT_THAT(refused.err, ::testing::HasSubstr("etcd")) << refused.err;
  std::cout << "a submit while etcd is down: " << refused.err;
  // Its lease unrenewable, the leader steps down (exit 3); its supervisor
  // (here the test) starts it again, and it answers as a standby naming etcd.
  std::optional<int> b_exit = b->Wait(seconds(30));
  ASSERT_TRUE(b_exit.has_value()) << b->Log();
  EXPECT_EQ(*b_exit, 3) << b->Log();
  b = StartStandby();
  ASSERT_TRUE(WaitForLeading("b", false, seconds(30))) << b->Log();
  CommandResult no_leader = cluster.Herd({"submit", spec});
  EXPECT_EQ(no_leader.exit_code, 3) << no_leader.out << no_leader.err;
  EXPECT_THAT(no_leader.err, ::testing::HasSubstr("etcd does not answer")) << no_leader.err;
  std::cout << "and once the leader stepped down: " << no_leader.err;
  EXPECT_TRUE(WaitUntil([&] { return LedgerBytes(ledger_dir_) > ledger_before + 4096; }, seconds(30)))
      << "the trainers stopped while etcd was down\n" << cluster.Logs();

  // etcd returns: the standby leads, the job trains on, the job submitted
  // before is there, and submits work again.
  for (int i = 0; i < 3; ++i) etcd_->Restart(i);
  ASSERT_TRUE(WaitForLeading("b", true, seconds(60))) << b->Log();
  auto recovered = WaitForProgressOn(cluster, id, 2, Field(after, "step"), seconds(90)).first;
  EXPECT_EQ(recovered.value("state", ""), "RUNNING") << recovered.dump(2) << cluster.Logs();
  EXPECT_GT(Field(recovered, "step"), Field(after, "step") + 10) << cluster.Logs();
  CommandResult accepted = cluster.Herd({"submit", spec});
  EXPECT_EQ(accepted.exit_code, 0) << accepted.err;
  // The job acknowledged before the outage is there; the refused submits
  // left nothing behind.
  nlohmann::json listed = cluster.HerdJson({"list"});
  std::vector<std::string> ids;
  for (const auto& job : listed.value("jobs", nlohmann::json::array())) ids.push_back(job.value("id", ""));
  EXPECT_EQ(ids.size(), 2u) << listed.dump(2);
  EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << listed.dump(2);
  b->Signal(SIGTERM);
  b->Wait(seconds(30));
}

// Whether the coordinator at `address` leads: its readiness check (the
// health check of "") answers SERVING only on the leader.
bool Leads(const std::string& address) {
  auto channel = MakeChannel(address);
  return channel.ok() && CheckHealth(*channel, "", std::chrono::seconds(2)).value_or(false);
}

TEST_F(CoordinatorFailoverTest, KillingEtcdsRaftLeaderIsOnlyAPauseForTheJob) {
  ASSERT_NO_FATAL_FAILURE(StartClusterWithStandby());
  LocalCluster& cluster = *cluster_;
  TrainingJob job;
  ASSERT_NO_FATAL_FAILURE(SubmitTrainingJob(&job));
  const std::string& id = job.id;
  const nlohmann::json& before = job.running;
  const int64_t recorded = job.recorded;
  const int64_t generation = Field(before, "generation");

  auto raft_leader = etcd_->RaftLeader();
  ASSERT_TRUE(raft_leader.ok()) << raft_leader.status();
  etcd_->Kill(*raft_leader);
  const auto killed = std::chrono::steady_clock::now();
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto now_leads = etcd_->RaftLeader();
        return now_leads.ok() && *now_leads != *raft_leader;
      },
      seconds(30)));
  std::cout << "etcd member " << *raft_leader << " (its Raft leader) was killed; another led "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count() << " s later\n";

  // The job trains on in the same generation, past what it had, and its
  // checkpoints are recorded (written to etcd) again beyond the last one.
  auto after = WaitForJob(
      cluster, id,
      [&](const auto& j) {
        return j.value("state", "") != "RUNNING" ||
               (Field(j, "step") > Field(before, "step") + 10 && RecordedStep(cluster, id) > recorded);
      },
      seconds(90));
  std::cout << "the job trained and recorded a checkpoint again "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count()
            << " s after the kill\n";
  EXPECT_EQ(after.value("state", ""), "RUNNING") << after.dump(2) << cluster.Logs();
  EXPECT_EQ(Field(after, "generation"), generation) << "the job noticed: a new generation\n" << after.dump(2);
  EXPECT_EQ(Field(after, "world_size"), 2);
  EXPECT_GT(Field(after, "step"), Field(before, "step") + 10) << cluster.Logs();
  EXPECT_GT(RecordedStep(cluster, id), recorded) << cluster.Logs();
  EXPECT_EQ(after.value("storage_warning", ""), "") << after.dump(2);

  // One coordinator leads: "a" kept its lease, or "b" took over (waited
  // for: a takeover may be under way).
  EXPECT_TRUE(WaitUntil([&] { return Leads(a_address_) != Leads(b_address_); }, seconds(30))) << b_->Log();
  std::cout << (Leads(a_address_) ? "the leading coordinator kept its lease\n" : "the standby took over\n");
  // Submits work on the two members left.
  const std::string spec = root_ + "/second.yaml";
  std::ofstream(spec) << "model: mlp\ndataset: {kind: synthetic}\nbatch_size: 8\n";
  CommandResult accepted = cluster.Herd({"submit", spec});
  EXPECT_EQ(accepted.exit_code, 0) << accepted.err;
  b_->Signal(SIGTERM);
  b_->Wait(seconds(30));
}

}  // namespace
}  // namespace herd::testing
