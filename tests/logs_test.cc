// `herd logs`: a trainer's log read through the coordinator from the worker
// daemon that runs (or ran) it, with a real coordinator, daemons, trainers
// and CLI.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/harness/local_cluster.h"

namespace herd::testing {
namespace {

using std::chrono::seconds;

constexpr char kShortJob[] = R"(
name: logs
model: mlp
dataset: {kind: synthetic, synthetic_samples: 512, synthetic_features: 32}
batch_size: 16
max_steps: 24
min_workers: 2
max_workers: 2
log_interval_steps: 2
)";

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// The index of the cluster's worker at `rank` of the job's generation.
int WorkerIndexAtRank(LocalCluster& cluster, const std::string& job, int rank) {
  nlohmann::json status = cluster.HerdJson({"status", job});
  std::string worker = status.at("workers").at(rank).get<std::string>();
  for (int i = 0; i < 2; ++i) {
    if (cluster.worker_id(i) == worker) return i;
  }
  ADD_FAILURE() << "no worker " << worker;
  return 0;
}

TEST(Logs, ARanksWholeLogTailAndJsonComeFromItsWorker) {
  LocalCluster cluster;
  const std::string job = cluster.Submit(kShortJob);
  ASSERT_EQ(cluster.WaitForState(job, {"SUCCEEDED", "FAILED"}, seconds(120)).value("state", ""), "SUCCEEDED")
      << cluster.Logs();
  for (int rank : {0, 1}) {
    const std::string file = ReadFile(cluster.job_dir(WorkerIndexAtRank(cluster, job, rank), job) + "/trainer.log");
    ASSERT_GT(Lines(file).size(), 5u) << file;
    CommandResult whole = cluster.Herd({"logs", job, "--rank", std::to_string(rank)});
    ASSERT_EQ(whole.exit_code, 0) << whole.err;
    EXPECT_EQ(whole.out, file) << "rank " << rank;
  }
  const int worker = WorkerIndexAtRank(cluster, job, 1);
  std::vector<std::string> lines = Lines(ReadFile(cluster.job_dir(worker, job) + "/trainer.log"));
  CommandResult tail = cluster.Herd({"logs", job, "-r", "1", "--tail", "3"});
  ASSERT_EQ(tail.exit_code, 0) << tail.err;
  EXPECT_EQ(Lines(tail.out), std::vector<std::string>(lines.end() - 3, lines.end()));

  CommandResult json = cluster.Herd({"logs", job, "-r", "1", "-o", "json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  std::vector<std::string> objects = Lines(json.out);
  ASSERT_EQ(objects.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    nlohmann::json object = nlohmann::json::parse(objects[i]);
    EXPECT_EQ(object.value("line", ""), lines[i]);
    EXPECT_EQ(object.value("worker_id", ""), cluster.worker_id(worker));
    EXPECT_EQ(object.value("rank", -1), 1);
    EXPECT_EQ(object.value("job_id", ""), job);
  }
}

TEST(Logs, FollowStreamsUntilTheTrainerExits) {
  LocalCluster cluster;
  const std::string job = cluster.Submit(R"(
name: followed
model: mlp
dataset: {kind: synthetic, synthetic_samples: 4096, synthetic_features: 32}
batch_size: 16
max_steps: 600
min_workers: 2
max_workers: 2
log_interval_steps: 20
)");
  ASSERT_EQ(cluster.WaitForState(job, {"RUNNING"}, seconds(120)).value("state", ""), "RUNNING") << cluster.Logs();
  const int worker = WorkerIndexAtRank(cluster, job, 0);
  const std::string path = cluster.job_dir(worker, job) + "/trainer.log";
  // Follow a trainer that is training: wait until it has logged a step.
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  while (ReadFile(path).find("step ") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(ReadFile(path).find("step "), std::string::npos) << cluster.Logs();
  // Returns only when the trainer has exited and its log is read to the end.
  CommandResult followed = cluster.Herd({"logs", job, "--follow"}, seconds(600));
  ASSERT_EQ(followed.exit_code, 0) << followed.err;
  nlohmann::json done = cluster.WaitForState(job, {"SUCCEEDED", "FAILED"}, seconds(60));
  ASSERT_EQ(done.value("state", ""), "SUCCEEDED") << cluster.Logs();
  // Everything the trainer wrote, including what it wrote while followed and
  // at its exit: the whole file as it stands after the trainer ended.
  EXPECT_EQ(followed.out, ReadFile(path));
  EXPECT_NE(followed.out.find("training finished"), std::string::npos) << followed.out;
}

TEST(Logs, OnlyTheOwnerOrAnAdminReadsAndBadRanksAreNamed) {
  LocalCluster cluster;
  const std::string job = cluster.Submit(kShortJob);
  ASSERT_EQ(cluster.WaitForState(job, {"SUCCEEDED", "FAILED"}, seconds(120)).value("state", ""), "SUCCEEDED")
      << cluster.Logs();
  CommandResult bob = cluster.HerdAs(cluster.credentials().other_user_token_file, {"logs", job});
  EXPECT_EQ(bob.exit_code, 1);
  EXPECT_NE(bob.err.find("'bob' may read only their own jobs' logs"), std::string::npos) << bob.err;
  EXPECT_TRUE(bob.out.empty()) << bob.out;
  CommandResult admin = cluster.HerdAs(cluster.credentials().admin_token_file, {"logs", job, "--tail", "1"});
  EXPECT_EQ(admin.exit_code, 0) << admin.err;
  EXPECT_EQ(Lines(admin.out).size(), 1u) << admin.out;

  CommandResult rank = cluster.Herd({"logs", job, "--rank", "2"});
  EXPECT_EQ(rank.exit_code, 1);
  EXPECT_NE(rank.err.find("rank 2: job " + job + " has ranks 0 to 1"), std::string::npos) << rank.err;
  CommandResult unknown = cluster.Herd({"logs", "job-does-not-exist"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("job-does-not-exist"), std::string::npos) << unknown.err;
  CommandResult negative = cluster.Herd({"logs", job, "--tail", "-1"});
  EXPECT_EQ(negative.exit_code, 2) << negative.err;
}

TEST(Logs, AWorkerWhoseDaemonIsGoneIsNamed) {
  LocalCluster cluster;
  const std::string job = cluster.Submit(kShortJob);
  ASSERT_EQ(cluster.WaitForState(job, {"SUCCEEDED", "FAILED"}, seconds(120)).value("state", ""), "SUCCEEDED")
      << cluster.Logs();
  const int worker = WorkerIndexAtRank(cluster, job, 1);
  cluster.worker(worker).Signal(SIGTERM);
  ASSERT_TRUE(cluster.worker(worker).Wait(seconds(60)).has_value());
  // Its log stream closed with it: the coordinator says so instead of waiting.
  CommandResult gone = cluster.Herd({"logs", job, "--rank", "1"});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_NE(gone.err.find(cluster.worker_id(worker)), std::string::npos) << gone.err;
}

}  // namespace
}  // namespace herd::testing
