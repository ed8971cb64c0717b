#include "worker/daemon/trainer_process.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "worker/daemon/wait_until.h"

namespace herd::worker {
namespace {

using std::chrono::milliseconds;

class TrainerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("trainer_process_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }

  SpawnOptions Shell(const std::string& script) {
    return SpawnOptions{{"/bin/sh", "-c", script}, (dir_ / "log").string()};
  }

  std::string ReadFile(const std::string& name) {
    std::ifstream in(dir_ / name);
    std::stringstream buffer;
    buffer << in.rdbuf();
    return buffer.str();
  }

  int WaitForExit(TrainerProcess& process) {
    std::optional<int> code;
    EXPECT_TRUE(WaitUntil([&] { return (code = process.Poll()).has_value(); }));
    return code.value_or(-1000);
  }

  std::filesystem::path dir_;
};

TEST(ExitCodeFromWaitStatusTest, ExitStatusAndSignal) {
  EXPECT_EQ(ExitCodeFromWaitStatus(3 << 8), 3);
  EXPECT_EQ(ExitCodeFromWaitStatus(SIGKILL), -9);
}

TEST_F(TrainerProcessTest, ReportsExitCodeAndAppendsOutputToLog) {
  std::ofstream(dir_ / "log") << "earlier run\n";
  auto process = TrainerProcess::Spawn(Shell("echo to-stdout; echo to-stderr >&2; exit 3"));
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_EQ(WaitForExit(**process), 3);
  EXPECT_EQ((*process)->exit_code(), 3);
  EXPECT_EQ(ReadFile("log"), "earlier run\nto-stdout\nto-stderr\n");
}

TEST_F(TrainerProcessTest, KilledBySignalIsNegative) {
  auto process = TrainerProcess::Spawn(Shell("kill -9 $$"));
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_EQ(WaitForExit(**process), -9);
}

TEST_F(TrainerProcessTest, RunsInItsOwnProcessGroup) {
  auto process = TrainerProcess::Spawn(Shell("exec sleep 100"));
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_EQ(getpgid((*process)->pid()), (*process)->pid());
  EXPECT_NE(getpgid((*process)->pid()), getpgrp());
  EXPECT_FALSE((*process)->Poll().has_value());
  (*process)->Signal(SIGTERM);
  EXPECT_EQ(WaitForExit(**process), -SIGTERM);
}

TEST_F(TrainerProcessTest, StopSendsTermFirst) {
  auto process = TrainerProcess::Spawn(Shell("trap 'exit 7' TERM; touch " + (dir_ / "ready").string() +
                                             "; while :; do sleep 0.05; done"));
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir_ / "ready"); }));
  // The trap runs the handler: the graceful path, no SIGKILL needed.
  EXPECT_EQ((*process)->Stop(std::chrono::seconds(10)), 7);
}

TEST_F(TrainerProcessTest, StopKillsAChildThatIgnoresTermAfterTheGrace) {
  auto process = TrainerProcess::Spawn(Shell("trap '' TERM; touch " + (dir_ / "ready").string() +
                                             "; while :; do sleep 0.05; done"));
  ASSERT_TRUE(process.ok()) << process.status();
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(dir_ / "ready"); }));
  auto start = std::chrono::steady_clock::now();
  (*process)->BeginStop(milliseconds(300));
  EXPECT_TRUE((*process)->stopping());
  EXPECT_EQ(WaitForExit(**process), -SIGKILL);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
}

TEST_F(TrainerProcessTest, HelpersLeftInTheGroupAreKilledWithTheTrainer) {
  std::string pid_file = (dir_ / "helper.pid").string();
  auto process = TrainerProcess::Spawn(Shell("sleep 100 & echo $! > " + pid_file + ".tmp; mv " + pid_file +
                                             ".tmp " + pid_file + "; exit 0"));
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_EQ(WaitForExit(**process), 0);
  ASSERT_TRUE(std::filesystem::exists(pid_file));
  pid_t helper = std::stoi(ReadFile("helper.pid"));
  // Gone, or a zombie waiting for init to reap it.
  EXPECT_TRUE(WaitUntil([&] {
    std::ifstream stat("/proc/" + std::to_string(helper) + "/stat");
    std::string pid, name, state;
    return !(stat >> pid >> name >> state) || state == "Z";
  }));
}

TEST_F(TrainerProcessTest, DestructorKillsARunningGroup) {
  pid_t pid = 0;
  {
    auto process = TrainerProcess::Spawn(Shell("exec sleep 100"));
    ASSERT_TRUE(process.ok()) << process.status();
    pid = (*process)->pid();
  }
  EXPECT_EQ(kill(pid, 0), -1);  // reaped: not even a zombie is left
}

TEST_F(TrainerProcessTest, MissingExecutableIsAnError) {
  auto process = TrainerProcess::Spawn(SpawnOptions{{(dir_ / "no-such-binary").string()}, (dir_ / "log").string()});
  EXPECT_FALSE(process.ok());
  EXPECT_NE(process.status().message().find("no-such-binary"), std::string::npos);
}

TEST_F(TrainerProcessTest, UnwritableLogIsAnError) {
  auto process = TrainerProcess::Spawn(SpawnOptions{{"/bin/true"}, (dir_ / "missing-dir" / "log").string()});
  EXPECT_FALSE(process.ok());
}

}  // namespace
}  // namespace herd::worker
