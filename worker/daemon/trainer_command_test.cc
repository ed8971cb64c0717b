#include "worker/daemon/trainer_command.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace herd::worker {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;

TEST(TrainerCommandTest, CpuWithToken) {
  TrainerCommand command;
  command.trainer_binary = "/opt/herd/herd-trainer";
  command.coordinator = "coord:7070";
  command.worker_id = "w1";
  command.token_file = "/etc/herd/token";
  EXPECT_THAT(BuildTrainerArgv(command, "job-1", "/work/jobs/job-1", std::nullopt),
              ElementsAre("/opt/herd/herd-trainer", "--coordinator=coord:7070", "--job=job-1", "--worker-id=w1",
                          "--work-dir=/work/jobs/job-1", "--device=cpu", "--token-file=/etc/herd/token",
                          "--termination-message-file=/work/jobs/job-1/termination-message",
                          "--alive-file=/work/jobs/job-1/trainer.alive"));
}

TEST(TrainerCommandTest, CudaInsecureWithTls) {
  TrainerCommand command;
  command.trainer_binary = "t";
  command.coordinator = "c:1";
  command.worker_id = "w";
  command.device = "cuda";
  command.insecure_no_auth = true;
  command.tls.ca_file = "ca.pem";
  command.tls.cert_file = "cert.pem";
  command.tls.key_file = "key.pem";
  EXPECT_THAT(BuildTrainerArgv(command, "j", "/d", 2),
              ElementsAre("t", "--coordinator=c:1", "--job=j", "--worker-id=w", "--work-dir=/d", "--device=cuda",
                          "--gpu=2", "--insecure-no-auth", "--tls-ca=ca.pem", "--tls-cert=cert.pem",
                          "--tls-key=key.pem", "--termination-message-file=/d/termination-message",
                          "--alive-file=/d/trainer.alive"));
}

TEST(TrainerCommandTest, DataPlaneGlooIsPassedOn) {
  TrainerCommand command;
  command.trainer_binary = "t";
  command.coordinator = "c:1";
  command.worker_id = "w";
  command.insecure_no_auth = true;
  command.data_plane = "gloo";
  EXPECT_THAT(BuildTrainerArgv(command, "j", "/d", std::nullopt), Contains("--data-plane=gloo"));
}

TEST(TrainerCommandTest, Paths) {
  EXPECT_EQ(TrainerLogPath("/w/jobs/a"), "/w/jobs/a/trainer.log");
  EXPECT_EQ(TerminationMessagePath("/w/jobs/a"), "/w/jobs/a/termination-message");
}

}  // namespace
}  // namespace herd::worker
