#include "worker/daemon/worker_config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace herd::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class WorkerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("HERD_COORDINATOR");
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("worker_config_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "bin");
    std::ofstream(dir_ / "bin" / "herd-trainer") << "#!/bin/sh\n";
    chmod((dir_ / "bin" / "herd-trainer").c_str(), 0755);
  }

  std::optional<WorkerConfig> Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "herd-worker");
    std::vector<const char*> argv;
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    out_.str("");
    err_.str("");
    return ParseWorkerFlags(static_cast<int>(argv.size()), argv.data(), out_, err_, &exit_code_);
  }

  absl::Status Finish(WorkerConfig* config) {
    return FinishWorkerConfig(config, "node1", (dir_ / "bin" / "herd-worker").string());
  }

  std::string WorkDirFlag() { return "--work-dir=" + (dir_ / "work").string(); }

  std::filesystem::path dir_;
  std::ostringstream out_, err_;
  int exit_code_ = -1;
};

TEST_F(WorkerConfigTest, Defaults) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  EXPECT_EQ(config->coordinator, "127.0.0.1:7070");
  EXPECT_EQ(config->listen, "127.0.0.1");
  EXPECT_EQ(config->metrics_listen, "127.0.0.1:9100");
  EXPECT_EQ(config->device, "cpu");
  EXPECT_EQ(config->trainer_kill_grace_seconds, 5);
  ASSERT_TRUE(Finish(&*config).ok());
  EXPECT_EQ(config->worker_id, "node1-work");
  EXPECT_EQ(config->trainer_binary, (dir_ / "bin" / "herd-trainer").string());
  EXPECT_EQ(config->device_count(), 1);
  EXPECT_TRUE(std::filesystem::is_directory(dir_ / "work"));
}

TEST_F(WorkerConfigTest, CoordinatorFromEnvironmentUnlessGiven) {
  setenv("HERD_COORDINATOR", "coord:9000", 1);
  EXPECT_EQ(Parse({WorkDirFlag(), "--insecure-no-auth"})->coordinator, "coord:9000");
  EXPECT_EQ(Parse({WorkDirFlag(), "--insecure-no-auth", "--coordinator=other:1"})->coordinator, "other:1");
}

TEST_F(WorkerConfigTest, AllFlags) {
  auto config = Parse({WorkDirFlag(), "--token-file=/t", "--coordinator=c:1", "--listen=10.0.0.5",
                       "--metrics-listen=", "--device=cuda", "--gpus=1,3", "--worker-id=gpu-7",
                       "--tls-ca=ca", "--tls-cert=cert", "--tls-key=key",
                       "--trainer-binary=" + (dir_ / "bin" / "herd-trainer").string(),
                       "--trainer-kill-grace-seconds=0.5", "--ready-file=/r.json"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  absl::Status finished = Finish(&*config);
  ASSERT_TRUE(finished.ok()) << finished;
  EXPECT_EQ(config->listen, "10.0.0.5");
  EXPECT_EQ(config->metrics_listen, "");
  EXPECT_THAT(config->gpu_indices, ElementsAre(1, 3));
  EXPECT_EQ(config->device_count(), 2);
  EXPECT_EQ(config->worker_id, "gpu-7");
  EXPECT_EQ(config->token_file, "/t");
  EXPECT_EQ(config->tls.ca_file, "ca");
  EXPECT_EQ(config->trainer_kill_grace_seconds, 0.5);
  EXPECT_EQ(config->ready_file, "/r.json");
}

TEST_F(WorkerConfigTest, ExactlyOneAuthFlag) {
  EXPECT_FALSE(Parse({WorkDirFlag()}).has_value());
  EXPECT_EQ(exit_code_, 2);
  EXPECT_THAT(err_.str(), HasSubstr("--token-file"));
  EXPECT_FALSE(Parse({WorkDirFlag(), "--insecure-no-auth", "--token-file=/t"}).has_value());
  EXPECT_EQ(exit_code_, 2);
}

TEST_F(WorkerConfigTest, UsageErrors) {
  EXPECT_FALSE(Parse({"--insecure-no-auth"}).has_value());  // --work-dir is required
  EXPECT_EQ(exit_code_, 2);
  EXPECT_FALSE(Parse({WorkDirFlag(), "--insecure-no-auth", "--device=tpu"}).has_value());
  EXPECT_EQ(exit_code_, 2);
  EXPECT_FALSE(Parse({WorkDirFlag(), "--insecure-no-auth", "--no-such-flag"}).has_value());
  EXPECT_EQ(exit_code_, 2);
}

TEST_F(WorkerConfigTest, DataPlaneTakesTheOldNameHerdForTcpSayingSoOnce) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  EXPECT_EQ(config->data_plane, "tcp");
  EXPECT_EQ(err_.str(), "");
  config = Parse({WorkDirFlag(), "--insecure-no-auth", "--data-plane=gloo"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  EXPECT_EQ(config->data_plane, "gloo");
  EXPECT_EQ(err_.str(), "");
  config = Parse({WorkDirFlag(), "--insecure-no-auth", "--data-plane=herd"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  EXPECT_EQ(config->data_plane, "tcp");
  EXPECT_EQ(err_.str(),
            "herd-worker: --data-plane=herd is the old name of --data-plane=tcp (herd's TCP mesh); it still works, "
            "but use tcp\n");
  EXPECT_FALSE(Parse({WorkDirFlag(), "--insecure-no-auth", "--data-plane=udp"}).has_value());
  EXPECT_EQ(exit_code_, 2);
}

TEST_F(WorkerConfigTest, HelpExitsZero) {
  EXPECT_FALSE(Parse({"--help"}).has_value());
  EXPECT_EQ(exit_code_, 0);
  EXPECT_THAT(out_.str(), HasSubstr("--trainer-kill-grace-seconds"));
  EXPECT_THAT(out_.str(), HasSubstr("--ready-file"));
}

TEST_F(WorkerConfigTest, VersionExitsZeroWithoutRequiredFlags) {
  EXPECT_FALSE(Parse({"--version"}).has_value());
  EXPECT_EQ(exit_code_, 0);
  EXPECT_EQ(out_.str(), std::string("herd-worker ") + kVersion + "\n");
}

TEST_F(WorkerConfigTest, RejectsBadWorkerId) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth", "--worker-id=a/b"});
  ASSERT_TRUE(config.has_value());
  absl::Status status = Finish(&*config);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_THAT(status.message(), HasSubstr("--worker-id"));
}

TEST_F(WorkerConfigTest, MissingTrainerBinaryIsAClearError) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth", "--trainer-binary=" + (dir_ / "nope").string()});
  ASSERT_TRUE(config.has_value());
  absl::Status status = Finish(&*config);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("--trainer-binary"));
  EXPECT_THAT(status.message(), HasSubstr("nope"));
}

TEST_F(WorkerConfigTest, GpuFlags) {
  auto cuda = Parse({WorkDirFlag(), "--insecure-no-auth", "--device=cuda"});
  ASSERT_TRUE(Finish(&*cuda).ok());
  EXPECT_THAT(cuda->gpu_indices, ElementsAre(0));

  auto cpu = Parse({WorkDirFlag(), "--insecure-no-auth", "--gpus=0"});
  EXPECT_FALSE(Finish(&*cpu).ok());

  std::vector<int> indices;
  EXPECT_FALSE(ParseGpuList("0,x", &indices).ok());
  EXPECT_FALSE(ParseGpuList("1,1", &indices).ok());
  EXPECT_FALSE(ParseGpuList("-1", &indices).ok());
}

TEST_F(WorkerConfigTest, LabelsAreRepeatable) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth", "--label", "site=us-east", "--label=pool=a100"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  ASSERT_TRUE(Finish(&*config).ok());
  EXPECT_EQ(config->labels, (Labels{{"site", "us-east"}, {"pool", "a100"}}));
}

TEST_F(WorkerConfigTest, NoLabelsByDefault) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  ASSERT_TRUE(Finish(&*config).ok());
  EXPECT_TRUE(config->labels.empty());
}

// One value per --label: a second word is not taken as another label.
TEST_F(WorkerConfigTest, LabelTakesOneValue) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth", "--label", "site=a", "pool=b"});
  EXPECT_FALSE(config.has_value());
  EXPECT_EQ(exit_code_, 2);
}

TEST_F(WorkerConfigTest, BadLabelFailsStartNamingIt) {
  auto config = Parse({WorkDirFlag(), "--insecure-no-auth", "--label", "site=us east"});
  ASSERT_TRUE(config.has_value()) << err_.str();
  absl::Status status = Finish(&*config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--label 'site=us east': value 'us east' of label 'site'"));
}

}  // namespace
}  // namespace herd::worker
