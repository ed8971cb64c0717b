// Per-job persistence and non-finite values, with real processes:
// the herd-coordinator binary and its SQLite file, worker daemons, trainers
// and the `herd` CLI.
//  - A diverging job (sgd at lr 1e30: its loss goes NaN) costs no other job
//    its saved progress, and a coordinator restart moves no job backwards.
//  - Non-finite spec values are refused naming the field and the value, by
//    the CLI and by the coordinator itself.
//  - A full state disk shows on the job (`herd status`, `herd watch`, a
//    metric) while training goes on, and everything is saved once it frees.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include "common/rpc_options.h"
#include "proto/herd.grpc.pb.h"
#include "tests/harness/http_client.h"
#include "tests/harness/job_watch.h"
#include "tests/harness/local_cluster.h"
#include "tests/harness/small_disk.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// sgd at lr 1e30 overflows the weights within a step or two.
constexpr char kDiverging[] =
    "name: diverging\n"
    "model: mlp\n"
    "dataset: {kind: synthetic, synthetic_samples: 2048, synthetic_features: 32}\n"
    "batch_size: 16\n"
    "max_steps: 40\n"
    "log_interval_steps: 5\n"
    "optimizer: {name: sgd, lr: 1.0e+30}\n"
    "min_workers: 1\n";

// Trains until cancelled.
constexpr char kHealthy[] =
    "name: healthy\n"
    "model: {name: mlp, hidden: [32]}\n"
    "dataset: {kind: synthetic, synthetic_samples: 2048, synthetic_features: 32}\n"
    "batch_size: 16\n"
    "max_steps: 100000000\n"
    "log_interval_steps: 5\n"
    "min_workers: 1\n";

// The job's step as the coordinator's database holds it (what a restart
// finds), or -1 when its row is not there.
int64_t StoredStep(const std::string& db_path, const std::string& job_id) {
  sqlite3* db = nullptr;
  int64_t step = -1;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* select = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT step FROM jobs WHERE id = ?", -1, &select, nullptr) == SQLITE_OK) {
      sqlite3_bind_text(select, 1, job_id.c_str(), -1, SQLITE_TRANSIENT);
      if (sqlite3_step(select) == SQLITE_ROW) step = sqlite3_column_int64(select, 0);
    }
    sqlite3_finalize(select);
  }
  sqlite3_close(db);
  return step;
}

// Polls the database until the job's stored step reaches `step`.
bool WaitForStoredStep(const std::string& db_path, const std::string& job_id, int64_t step, seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (StoredStep(db_path, job_id) >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string Database(const LocalCluster& cluster) { return cluster.state_dir() + "/coordinator.db"; }

TEST(Persistence, ADivergingJobCostsNoOtherJobItsSavedProgressAndARestartMovesNothingBack) {
  LocalCluster cluster;  // two workers: one job each
  const std::string diverging = cluster.Submit(kDiverging);
  const std::string healthy = cluster.Submit(kHealthy);
  const nlohmann::json ended = cluster.WaitForState(diverging, {"SUCCEEDED", "FAILED"}, seconds(180));
  ASSERT_TRUE(ended.value("state", "") == "SUCCEEDED" || ended.value("state", "") == "FAILED") << cluster.Logs();

  auto running = WaitForJob(
      cluster, healthy, [](const auto& j) { return j.value("state", "") == "RUNNING" && Field(j, "step") >= 20; },
      seconds(120));
  ASSERT_GE(Field(running, "step"), 20) << running.dump(2) << cluster.Logs();
  const int64_t step = Field(running, "step");
  // Its progress reaches the database beside the diverged job's.
  EXPECT_TRUE(WaitForStoredStep(Database(cluster), healthy, step, seconds(30)))
      << "stored step " << StoredStep(Database(cluster), healthy) << ", shown " << step << "\n"
      << ReadFile(cluster.root() + "/coordinator.log");
  EXPECT_TRUE(WaitForStoredStep(Database(cluster), diverging, Field(ended, "step"), seconds(30)));
  EXPECT_EQ(cluster.HerdJson({"status", healthy}).value("storage_warning", "?"), "");

  cluster.StopCoordinator(SIGKILL);
  cluster.StartCoordinator();
  const nlohmann::json after = cluster.HerdJson({"status", diverging});
  EXPECT_EQ(after.value("state", ""), ended.value("state", "")) << after.dump(2);
  EXPECT_EQ(Field(after, "step"), Field(ended, "step"));
  EXPECT_EQ(after["loss"], ended["loss"]);  // "NaN" stays "NaN"
  const nlohmann::json healthy_after = cluster.HerdJson({"status", healthy});
  EXPECT_EQ(healthy_after.value("state", ""), "RUNNING");
  EXPECT_GE(Field(healthy_after, "step"), step);
  // And it trains on from there.
  auto resumed = WaitForJob(
      cluster, healthy, [&](const auto& j) { return Field(j, "step") >= step + 20; }, seconds(120));
  EXPECT_GE(Field(resumed, "step"), step + 20) << resumed.dump(2) << cluster.Logs();
  EXPECT_EQ(cluster.Herd({"cancel", healthy}).exit_code, 0);
}

TEST(Persistence, NonFiniteSpecValuesAreRefusedNamingFieldAndValue) {
  ClusterOptions options;
  options.workers = 0;
  LocalCluster cluster(options);
  const std::pair<std::string, std::string> cases[] = {
      {"optimizer: {lr: .inf}", "optimizer.lr: must be a finite number, got inf"},
      {"optimizer: {name: adam, beta1: .nan}", "optimizer.beta1: must be a finite number, got nan"},
      {"optimizer: {name: adam, beta2: .nan}", "optimizer.beta2: must be a finite number, got nan"},
      {"optimizer: {name: adam, eps: -.inf}", "optimizer.eps: must be a finite number, got -inf"},
      {"optimizer: {name: adam, eps: .nan}", "optimizer.eps: must be a finite number, got nan"},
      {"optimizer: {momentum: .nan}", "optimizer.momentum: must be a finite number, got nan"},
      {"optimizer: {weight_decay: .nan}", "optimizer.weight_decay: must be a finite number, got nan"},
      {"schedule: {name: cosine, min_lr: .nan}", "schedule.min_lr: must be a finite number, got nan"},
      {"optimizer: {name: adam, eps: -1.0e-8}", "optimizer.eps: must be in (0, 1], got -1e-08"},
      {"epochs: 9223372036854775807", "epochs: must be in [0, 1000000], got 9223372036854775807"},
  };
  const std::string base = "model: mlp\ndataset: {kind: synthetic}\nbatch_size: 8\nmax_steps: 10\n";
  int index = 0;
  for (const auto& [line, message] : cases) {
    const std::string path = cluster.root() + "/bad-" + std::to_string(index++) + ".yaml";
    std::ofstream(path) << base << line << "\n";
    CommandResult submitted = cluster.Herd({"submit", path});
    EXPECT_NE(submitted.exit_code, 0) << line;
    EXPECT_NE(submitted.err.find(message), std::string::npos) << line << ": " << submitted.err;
  }

  // The coordinator checks on its own: a client that skips the CLI's check
  // (here a raw gRPC call) is refused too.
  auto channel = MakeChannel(cluster.address());
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto stub = v1::JobService::NewStub(*channel);
  std::string token = ReadFile(cluster.credentials().user_token_file);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  v1::SubmitJobRequest request;
  request.mutable_spec()->mutable_model()->set_name("mlp");
  request.mutable_spec()->mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  request.mutable_spec()->set_batch_size(8);
  request.mutable_spec()->mutable_optimizer()->set_lr(std::numeric_limits<double>::infinity());
  v1::SubmitJobResponse response;
  grpc::Status status = stub->SubmitJob(NewCallContext(token, std::chrono::seconds(10)).get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "optimizer.lr: must be a finite number, got inf");
  request.mutable_spec()->mutable_optimizer()->set_lr(0.1);
  request.mutable_spec()->mutable_sync()->set_bucket_cap_mib(std::nan(""));
  status = stub->SubmitJob(NewCallContext(token, std::chrono::seconds(10)).get(), request, &response);
  EXPECT_EQ(status.error_message(), "sync.bucket_cap_mib: must be a finite number, got nan");
  EXPECT_TRUE(cluster.HerdJson({"list"}).value("jobs", nlohmann::json::array()).empty());
}

// The value of an unlabelled or labelled series on a /metrics page, or -1.
double Scrape(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + series.size() + 2));
}

// True when `herd watch -o json` printed a job with the storage warning and
// a later one without.
bool WarningCameAndWent(const std::string& lines) {
  bool warned = false;
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) {
    auto job = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!job.is_object()) continue;
    const std::string warning = job.value("storage_warning", "?");
    if (warning.find("the coordinator cannot persist this job's state since") != std::string::npos) warned = true;
    if (warned && warning.empty()) return true;
  }
  return false;
}

TEST(Persistence, AFullStateDiskIsShownOnTheJobAndEverythingIsSavedOnceItFrees) {
  SmallDisk disk("8m", "state-disk");
  ASSERT_TRUE(disk.mounted());
  ClusterOptions options;
  options.workers = 1;
  options.state_dir = disk.dir() + "/state";
  LocalCluster cluster(options);
  const std::string id = cluster.Submit(kHealthy);
  auto started = WaitForJob(cluster, id, [](const auto& j) { return Field(j, "step") >= 10; }, seconds(120));
  ASSERT_GE(Field(started, "step"), 10) << cluster.Logs();
  // `herd watch` sees what follows, as JSON lines.
  Process watch({LocalCluster::Binary("client/herd"), "watch", id, "-o", "json"}, cluster.root() + "/watch.out",
                {"HERD_COORDINATOR=" + cluster.address(), "HERD_TOKEN_FILE=" + cluster.credentials().user_token_file});

  disk.Fill();
  auto warned = WaitForJob(
      cluster, id,
      [](const auto& j) { return j.value("storage_warning", "").find("cannot persist") != std::string::npos; },
      seconds(60));
  const std::string warning = warned.value("storage_warning", "");
  ASSERT_NE(warning.find("the coordinator cannot persist this job's state since "), std::string::npos)
      << warned.dump(2) << ReadFile(cluster.root() + "/coordinator.log");
  EXPECT_NE(warning.find("database or disk is full"), std::string::npos) << warning;
  EXPECT_NE(cluster.Herd({"status", id}).out.find("Storage:"), std::string::npos);
  auto metrics = HttpGet(cluster.coordinator_metrics_address(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_GT(Scrape(metrics->body, "herd_coordinator_state_write_failures_total{record=\"job\"}"), 0) << metrics->body;
  EXPECT_EQ(Scrape(metrics->body, "herd_coordinator_jobs_unsaved"), 1) << metrics->body;
  // Training goes on meanwhile, and `herd status` follows it.
  const int64_t during = Field(warned, "step");
  auto later = WaitForJob(cluster, id, [&](const auto& j) { return Field(j, "step") >= during + 20; }, seconds(120));
  EXPECT_GE(Field(later, "step"), during + 20) << later.dump(2);
  EXPECT_LT(StoredStep(Database(cluster), id), during + 20);  // none of it was saved

  disk.Free();
  auto recovered =
      WaitForJob(cluster, id, [](const auto& j) { return j.value("storage_warning", "?").empty(); }, seconds(60));
  ASSERT_EQ(recovered.value("storage_warning", "?"), "") << recovered.dump(2);
  const int64_t step = Field(recovered, "step");
  EXPECT_TRUE(WaitForStoredStep(Database(cluster), id, step, seconds(30)));
  // `herd watch` showed the warning come and go.
  const auto deadline = Clock::now() + seconds(30);
  while (!WarningCameAndWent(watch.Log()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(WarningCameAndWent(watch.Log())) << watch.Log();

  cluster.StopCoordinator(SIGKILL);
  cluster.StartCoordinator();
  EXPECT_GE(Field(cluster.HerdJson({"status", id}), "step"), step);
  EXPECT_EQ(cluster.Herd({"cancel", id}).exit_code, 0);
}

}  // namespace
}  // namespace herd::testing
