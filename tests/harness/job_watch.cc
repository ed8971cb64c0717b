#include "tests/harness/job_watch.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "tests/harness/process.h"
#include "worker/contract/trainer_contract.h"

namespace herd::testing {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::seconds;

namespace {

std::vector<pid_t> Pgrep(const std::string& pattern) {
  CommandResult found = RunCommand({"/usr/bin/pgrep", "-f", pattern}, seconds(10));
  std::vector<pid_t> pids;
  std::istringstream lines(found.out);
  for (pid_t pid; lines >> pid;) pids.push_back(pid);
  return pids;
}

}  // namespace

// pids of the trainers a worker runs.
std::vector<pid_t> TrainerPids(const LocalCluster& cluster, int index) {
  return Pgrep("herd-trainer .*--work-dir=" + cluster.worker_dir(index) + "/");
}

// Signals a worker daemon and its trainers: the whole machine fails.
void SignalWorker(LocalCluster& cluster, int index, int signal) {
  for (pid_t pid : TrainerPids(cluster, index)) kill(pid, signal);
  cluster.worker(index).Signal(signal);
}

// Polls `herd status` until `done(job)` or the timeout; returns the last status.
nlohmann::json WaitForJob(LocalCluster& cluster, const std::string& id,
                          const std::function<bool(const nlohmann::json&)>& done, seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  nlohmann::json job;
  while (Clock::now() < deadline) {
    job = cluster.HerdJson({"status", id});
    if (done(job)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return job;
}

int64_t Field(const nlohmann::json& job, const char* name) { return job.value(name, int64_t{0}); }

// Waits until the job (or its end) shows `world` ranks training more than 10
// steps past `step`; returns the last status and the seconds it took.
std::pair<nlohmann::json, double> WaitForProgressOn(LocalCluster& cluster, const std::string& id, int64_t world,
                                                    int64_t step, seconds timeout) {
  const auto start = Clock::now();
  auto job = WaitForJob(
      cluster, id,
      [&](const auto& j) {
        return j.value("state", "") != "RUNNING" || (Field(j, "world_size") == world && Field(j, "step") > step + 10);
      },
      timeout);
  return {job, std::chrono::duration<double>(Clock::now() - start).count()};
}

void ExpectShownAsHung(LocalCluster& cluster, const std::string& id, const nlohmann::json& job, int index,
                       int64_t at_least) {
  const nlohmann::json left_out = job.value("unresponsive", nlohmann::json::array());
  ASSERT_EQ(left_out.size(), 1u) << job.dump(2);
  EXPECT_EQ(left_out[0].value("worker_id", ""), cluster.worker_id(index)) << job.dump(2);
  EXPECT_EQ(left_out[0].value("unreachable_from", ""), "") << job.dump(2);
  EXPECT_GE(Field(left_out[0], "step"), at_least) << job.dump(2);
  const std::string text = cluster.Herd({"status", id}).out;
  EXPECT_NE(text.find("Hung:"), std::string::npos) << text;
  EXPECT_NE(text.find("worker " + cluster.worker_id(index) + " (rank "), std::string::npos) << text;
  EXPECT_EQ(text.find("Unreachable:"), std::string::npos) << text;
}

std::vector<std::string> ReadLedgers(const std::string& dir, const std::string& job_id) {
  std::vector<std::string> contents;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!job_id.empty() && entry.path().filename().string().rfind(job_id + ".", 0) != 0) continue;
    contents.push_back(ReadFile(entry.path().string()));
  }
  return contents;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

LedgerReplay ExpectEachSampleOnce(const std::string& dir, size_t epochs, int64_t samples, const std::string& job_id) {
  auto replay = ReplayLedgers(ReadLedgers(dir, job_id));
  EXPECT_TRUE(replay.ok()) << replay.status();
  if (!replay.ok()) return LedgerReplay{};
  EXPECT_EQ(replay->committed.size(), epochs);
  for (auto& [epoch, ids] : replay->committed) {
    std::vector<int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, Iota(samples)) << "epoch " << epoch << ": " << sorted.size() << " committed samples";
  }
  return *std::move(replay);
}

int Count(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++count;
  return count;
}

std::string NewLedgerDir() {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ledger-" + std::to_string(getpid()) + "-" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::create_directories(dir);
  return dir;
}

bool HoldTrainersUntilReformAsked(LocalCluster& cluster, const std::string& id, const std::vector<int>& members,
                                  int64_t generation, const std::function<bool()>& act,
                                  std::chrono::seconds timeout) {
  std::vector<pid_t> stopped;
  for (int member : members) {
    for (pid_t pid : TrainerPids(cluster, member)) {
      if (kill(pid, SIGSTOP) == 0) stopped.push_back(pid);
    }
  }
  const std::string request = ReformRequestPath(cluster.job_dir(members.at(0), id));
  const bool asked = act() && WaitForFile(request, timeout) && ReadReformRequest(request) == generation;
  for (pid_t pid : stopped) kill(pid, SIGCONT);
  return asked;
}

}  // namespace herd::testing
