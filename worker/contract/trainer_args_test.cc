#include "worker/contract/trainer_args.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace herd {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<TrainerArgs> Parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "herd-trainer");
  std::vector<const char*> argv;
  for (const std::string& flag : flags) argv.push_back(flag.c_str());
  return ParseArgv(static_cast<int>(argv.size()), argv.data());
}

TrainerArgs Required() {
  TrainerArgs args;
  args.job = "job-1";
  args.worker_id = "w1";
  args.work_dir = "/work/jobs/job-1";
  return args;
}

TEST(TrainerArgsTest, DefaultsRoundTrip) {
  TrainerArgs args = Required();
  EXPECT_THAT(ToArgv(args), ElementsAre("--coordinator=127.0.0.1:7070", "--job=job-1", "--worker-id=w1",
                                        "--work-dir=/work/jobs/job-1", "--device=cpu"));
  auto parsed = Parse(ToArgv(args));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, args);
}

TEST(TrainerArgsTest, EveryFieldRoundTrips) {
  TrainerArgs args = Required();
  args.coordinator = "coord:7171";
  args.device = "cuda";
  args.gpu = 3;
  args.insecure_no_auth = true;
  args.tls_ca = "ca.pem";
  args.tls_cert = "cert.pem";
  args.tls_key = "key.pem";
  args.termination_message_file = "/d/termination-message";
  args.alive_file = "/d/trainer.alive";
  args.join_timeout_seconds = 0.1;  // not exact in binary: must come back bit for bit
  args.checkpoint_root = "/shared/ckpt with space";
  args.collective_timeout_seconds = 12.5;
  args.data_plane = "gloo";
  args.congestion_control = "cubic";
  args.data_plane_lanes = 7;
  auto parsed = Parse(ToArgv(args));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, args);
  EXPECT_EQ(parsed->join_timeout_seconds, 0.1);
}

TEST(TrainerArgsTest, LanesOutsideTheirBoundsAreRefusedByName) {
  for (int lanes : {0, kMaxTcpMeshLanes + 1}) {
    std::vector<std::string> argv = ToArgv(Required());
    argv.push_back("--data-plane-lanes=" + std::to_string(lanes));
    auto parsed = Parse(argv);
    ASSERT_FALSE(parsed.ok()) << lanes;
    EXPECT_NE(parsed.status().message().find("--data-plane-lanes"), std::string::npos) << parsed.status();
  }
}

TEST(TrainerArgsTest, TokenFileRoundTrips) {
  TrainerArgs args = Required();
  args.token_file = "/etc/herd/token";
  auto parsed = Parse(ToArgv(args));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->token_file, "/etc/herd/token");
  EXPECT_FALSE(parsed->insecure_no_auth);
}

TEST(TrainerArgsTest, ProbeDevicesAlone) {
  auto parsed = Parse({kProbeDevicesFlag});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->action, TrainerArgs::Action::kProbeDevices);
}

TEST(TrainerArgsTest, HelpAndVersionPrintAndExit) {
  auto help = Parse({"--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_EQ(help->action, TrainerArgs::Action::kPrintAndExit);
  EXPECT_THAT(help->output, HasSubstr("--join-timeout-seconds"));
  auto version = Parse({"--version"});
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->action, TrainerArgs::Action::kPrintAndExit);
  EXPECT_THAT(version->output, HasSubstr("herd-trainer "));
}

TEST(TrainerArgsTest, UnknownFlagIsNamed) {
  std::vector<std::string> flags = ToArgv(Required());
  flags.push_back("--no-such-flag=1");
  auto parsed = Parse(flags);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("--no-such-flag"));
  EXPECT_EQ(ExitCodeForBadArgs(parsed.status()), 109);  // CLI11's ExtrasError, as before
}

TEST(TrainerArgsTest, MissingValueIsNamed) {
  auto parsed = Parse({"--job=j", "--worker-id=w", "--work-dir"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--work-dir"));
  EXPECT_NE(ExitCodeForBadArgs(parsed.status()), 0);
}

TEST(TrainerArgsTest, MissingRequiredFlagIsNamed) {
  auto parsed = Parse({"--job=j", "--worker-id=w"});
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--work-dir"));
}

TEST(TrainerArgsTest, NonNumericValueIsNamed) {
  std::vector<std::string> flags = ToArgv(Required());
  flags.push_back("--gpu=one");
  auto parsed = Parse(flags);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--gpu"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("one"));

  flags = ToArgv(Required());
  flags.push_back("--join-timeout-seconds=soon");
  parsed = Parse(flags);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--join-timeout-seconds"));
}

TEST(TrainerArgsTest, UnknownDeviceIsNamed) {
  TrainerArgs args = Required();
  args.device = "tpu";
  auto parsed = Parse(ToArgv(args));
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--device"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("tpu"));
}

TEST(TrainerArgsTest, UnknownDataPlaneIsNamed) {
  TrainerArgs args = Required();
  args.data_plane = "udp";
  auto parsed = Parse(ToArgv(args));
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--data-plane"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("udp"));
}

TEST(TrainerArgsTest, DataPlaneIsTcpByDefaultAndTheOldNameHerdStillParses) {
  TrainerArgs args = Required();
  EXPECT_EQ(args.data_plane, "tcp");
  args.data_plane = "herd";
  auto parsed = Parse(ToArgv(args));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->data_plane, "herd");
  std::string warning;
  EXPECT_EQ(CurrentDataPlaneName(parsed->data_plane, &warning), "tcp");
  EXPECT_THAT(warning, HasSubstr("--data-plane=herd is the old name of --data-plane=tcp"));
  EXPECT_EQ(CurrentDataPlaneName("tcp", &warning), "tcp");
  EXPECT_EQ(warning, "");
  EXPECT_EQ(CurrentDataPlaneName("gloo", &warning), "gloo");
  EXPECT_EQ(warning, "");
}

TEST(TrainerArgsTest, ControlCharacterInTextIsNamed) {
  TrainerArgs args = Required();
  args.job = "job\n1";
  auto parsed = Parse(ToArgv(args));
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.status().message(), HasSubstr("--job"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("control character"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("job\\n1"));
}

}  // namespace
}  // namespace herd
