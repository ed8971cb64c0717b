#include "worker/daemon/trainer_supervisor.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/daemon/wait_until.h"

namespace herd::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Shell prelude for fake trainers: logs its argv and finds its message file.
constexpr char kPrelude[] = R"(#!/bin/sh
echo "argv: $*"
for a in "$@"; do case "$a" in --termination-message-file=*) msg="${a#*=}";; esac; done
)";

v1::Assignment Assign(const std::string& job, int64_t generation = 1) {
  v1::Assignment assignment;
  assignment.set_job_id(job);
  assignment.set_generation(generation);
  return assignment;
}

class TrainerSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("supervisor_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "work");
    options_.work_dir = (dir_ / "work").string();
    options_.command.trainer_binary = (dir_ / "trainer.sh").string();
    options_.command.coordinator = "127.0.0.1:1";
    options_.command.worker_id = "w1";
    options_.command.insecure_no_auth = true;
    options_.kill_grace = std::chrono::seconds(5);
  }

  void WriteTrainer(const std::string& body) {
    std::ofstream(dir_ / "trainer.sh") << kPrelude << body << "\n";
    chmod((dir_ / "trainer.sh").c_str(), 0755);
  }

  std::string JobFile(const std::string& job, const std::string& name) {
    std::ifstream in(dir_ / "work" / "jobs" / job / name);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }

  // Polls until `count` exits are pending; returns the report carrying them.
  HeartbeatReport AwaitExits(TrainerSupervisor& supervisor, size_t count) {
    HeartbeatReport report;
    EXPECT_TRUE(WaitUntil([&] {
      supervisor.Poll();
      report = supervisor.PrepareReport();
      return report.exits.size() >= count;
    }));
    return report;
  }

  std::filesystem::path dir_;
  SupervisorOptions options_;
  prometheus::Registry registry_;
  WorkerMetrics metrics_{registry_, "w1", "cpu"};
};

TEST_F(TrainerSupervisorTest, StartsATrainerPerAssignmentInItsJobDir) {
  WriteTrainer("exec sleep 100");
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a"), Assign("job-b")});
  EXPECT_THAT(supervisor.RunningJobs(), ElementsAre("job-a", "job-b"));
  EXPECT_THAT(supervisor.PrepareReport().running_jobs, ElementsAre("job-a", "job-b"));
  std::string job_dir = (dir_ / "work" / "jobs" / "job-a").string();
  ASSERT_TRUE(WaitUntil([&] { return !JobFile("job-a", "trainer.log").empty(); }));
  EXPECT_EQ(JobFile("job-a", "trainer.log"),
            "argv: --coordinator=127.0.0.1:1 --job=job-a --worker-id=w1 --work-dir=" + job_dir +
                " --device=cpu --insecure-no-auth --termination-message-file=" + job_dir + "/termination-message" +
                " --alive-file=" + job_dir + "/trainer.alive\n");
  // The same assignments again start nothing new.
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a"), Assign("job-b")});
  EXPECT_EQ(supervisor.RunningJobs().size(), 2u);
}

TEST_F(TrainerSupervisorTest, ReportsExitsUntilAHeartbeatCarriesThem) {
  WriteTrainer("echo 'disk full' > \"$msg\"; exit 3");
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a", 4)});
  HeartbeatReport report = AwaitExits(supervisor, 1);
  ASSERT_EQ(report.exits.size(), 1u);
  EXPECT_EQ(report.exits[0].job_id(), "job-a");
  EXPECT_EQ(report.exits[0].generation(), 4);
  EXPECT_EQ(report.exits[0].exit_code(), 3);
  EXPECT_EQ(report.exits[0].message(), "disk full");
  EXPECT_THAT(report.running_jobs, IsEmpty());

  // A heartbeat that failed acknowledges nothing: the exit is reported again.
  EXPECT_EQ(supervisor.PrepareReport().exits.size(), 1u);
  supervisor.ApplyAssignments(report, {});
  EXPECT_THAT(supervisor.PrepareReport().exits, IsEmpty());
}

TEST_F(TrainerSupervisorTest, DoesNotRestartAJobWhoseExitTheCoordinatorHasNotSeen) {
  WriteTrainer("exit 1");
  TrainerSupervisor supervisor(options_, &metrics_);
  HeartbeatReport before_exit = supervisor.PrepareReport();
  supervisor.ApplyAssignments(before_exit, {Assign("job-a")});
  AwaitExits(supervisor, 1);
  // This response answers a report made before the exit: it still assigns
  // the job only because the coordinator did not know.
  supervisor.ApplyAssignments(before_exit, {Assign("job-a")});
  EXPECT_THAT(supervisor.RunningJobs(), IsEmpty());
  // Once the exit was carried, a job still assigned is started again.
  WriteTrainer("exec sleep 100");
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a", 2)});
  EXPECT_THAT(supervisor.RunningJobs(), ElementsAre("job-a"));
}

TEST_F(TrainerSupervisorTest, StopsTrainersNoLongerAssigned) {
  WriteTrainer("exec sleep 100");
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a"), Assign("job-b")});
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-b")});
  HeartbeatReport report = AwaitExits(supervisor, 1);
  ASSERT_EQ(report.exits.size(), 1u);
  EXPECT_EQ(report.exits[0].job_id(), "job-a");
  EXPECT_EQ(report.exits[0].exit_code(), -SIGTERM);
  EXPECT_THAT(supervisor.RunningJobs(), ElementsAre("job-b"));
}

// A trainer that stops refreshing its alive file (hung, or SIGSTOPped) is
// killed once the deadline passes, and its exit says why; one that keeps
// refreshing it is left alone.
TEST_F(TrainerSupervisorTest, KillsATrainerStuckPastTheDeadline) {
  options_.stuck_after = std::chrono::seconds(2);
  options_.kill_grace = std::chrono::milliseconds(200);
  WriteTrainer(R"(alive=""; for a in "$@"; do case "$a" in --alive-file=*) alive="${a#*=}";; esac; done
if [ "$HERD_TEST_JOB" = busy ]; then while true; do touch "$alive"; sleep 0.2; done; fi
kill -STOP $$)");
  TrainerSupervisor supervisor(options_, &metrics_);
  setenv("HERD_TEST_JOB", "busy", 1);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-busy")});
  unsetenv("HERD_TEST_JOB");
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-busy"), Assign("job-hung")});
  HeartbeatReport report = AwaitExits(supervisor, 1);
  ASSERT_EQ(report.exits.size(), 1u);
  EXPECT_EQ(report.exits[0].job_id(), "job-hung");
  EXPECT_EQ(report.exits[0].exit_code(), -SIGKILL);  // SIGTERM stays pending in a stopped process
  EXPECT_THAT(report.exits[0].message(), HasSubstr("no sign of progress for 2 s"));
  EXPECT_THAT(supervisor.RunningJobs(), ElementsAre("job-busy"));
}

TEST_F(TrainerSupervisorTest, StaleTerminationMessageIsNotReported) {
  WriteTrainer("echo 'crashed quietly'; exit 2");
  std::filesystem::create_directories(dir_ / "work" / "jobs" / "job-a");
  std::ofstream(dir_ / "work" / "jobs" / "job-a" / "termination-message") << "from an earlier run";
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a")});
  HeartbeatReport report = AwaitExits(supervisor, 1);
  EXPECT_EQ(report.exits[0].message(), "crashed quietly");
}

TEST_F(TrainerSupervisorTest, RejectsJobIdsThatAreNotSafePathComponents) {
  WriteTrainer("exec sleep 100");
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("../escape")});
  HeartbeatReport report = supervisor.PrepareReport();
  EXPECT_THAT(report.running_jobs, IsEmpty());
  ASSERT_EQ(report.exits.size(), 1u);
  EXPECT_EQ(report.exits[0].exit_code(), kSpawnFailedExitCode);
  EXPECT_THAT(report.exits[0].message(), HasSubstr("invalid job id"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "work" / "escape"));
  // Reported once, not on every heartbeat that repeats the assignment.
  supervisor.ApplyAssignments(report, {Assign("../escape")});
  EXPECT_THAT(supervisor.PrepareReport().exits, IsEmpty());
}

TEST_F(TrainerSupervisorTest, UnstartableTrainerIsReportedAsAnExit) {
  options_.command.trainer_binary = (dir_ / "missing").string();
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a")});
  HeartbeatReport report = supervisor.PrepareReport();
  ASSERT_EQ(report.exits.size(), 1u);
  EXPECT_EQ(report.exits[0].exit_code(), kSpawnFailedExitCode);
  EXPECT_THAT(report.exits[0].message(), HasSubstr("missing"));
}

TEST_F(TrainerSupervisorTest, SpreadsCudaTrainersOverGpus) {
  WriteTrainer("exec sleep 100");
  options_.command.device = "cuda";
  options_.gpus = {2, 5};
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a"), Assign("job-b")});
  ASSERT_TRUE(WaitUntil([&] {
    return !JobFile("job-a", "trainer.log").empty() && !JobFile("job-b", "trainer.log").empty();
  }));
  EXPECT_THAT(JobFile("job-a", "trainer.log"), HasSubstr("--device=cuda --gpu=2 "));
  EXPECT_THAT(JobFile("job-b", "trainer.log"), HasSubstr("--device=cuda --gpu=5 "));
}

TEST_F(TrainerSupervisorTest, StopAllTerminatesEveryTrainer) {
  WriteTrainer("exec sleep 100");
  TrainerSupervisor supervisor(options_, &metrics_);
  supervisor.ApplyAssignments(supervisor.PrepareReport(), {Assign("job-a"), Assign("job-b")});
  supervisor.StopAll();
  EXPECT_THAT(supervisor.RunningJobs(), IsEmpty());
  HeartbeatReport report = supervisor.PrepareReport();
  ASSERT_EQ(report.exits.size(), 2u);
  EXPECT_EQ(report.exits[0].exit_code(), -SIGTERM);
  EXPECT_EQ(report.exits[1].exit_code(), -SIGTERM);
}

}  // namespace
}  // namespace herd::worker
