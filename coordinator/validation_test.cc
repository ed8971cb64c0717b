#include "coordinator/validation.h"

#include <gtest/gtest.h>

namespace herd::coordinator {
namespace {

TEST(Validation, WorkerIds) {
  EXPECT_TRUE(ValidateWorkerId("node-1.rack_2").ok());
  EXPECT_TRUE(ValidateWorkerId(std::string(128, 'a')).ok());
  EXPECT_EQ(ValidateWorkerId("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateWorkerId(std::string(129, 'a')).code(), absl::StatusCode::kInvalidArgument);
  for (const char* bad : {"a b", "a/b", "a,b", "w\n", "wörker"}) {
    absl::Status status = ValidateWorkerId(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(status.message().rfind("worker_id:", 0), 0u) << status;
  }
}

TEST(Validation, Registration) {
  v1::RegisterWorkerRequest request;
  request.set_worker_id("w1");
  request.set_address("10.0.0.1");
  request.set_device_kind("cuda");
  request.set_device_count(8);
  EXPECT_TRUE(ValidateRegistration(request).ok());
  request.set_device_kind("tpu");
  EXPECT_EQ(ValidateRegistration(request).message().rfind("device_kind:", 0), 0u);
  request.set_device_kind("cpu");
  request.clear_address();
  EXPECT_EQ(ValidateRegistration(request).message().rfind("address:", 0), 0u);
}

TEST(Validation, Incarnation) {
  EXPECT_TRUE(ValidateIncarnation("").ok());
  EXPECT_TRUE(ValidateIncarnation("0123456789abcdef").ok());
  for (const std::string& bad : {std::string("a b"), std::string("x\n"), std::string(65, 'a')}) {
    EXPECT_EQ(ValidateIncarnation(bad).message().rfind("incarnation (x-herd-incarnation metadata):", 0), 0u) << bad;
  }
}

TEST(Validation, CheckpointPaths) {
  EXPECT_TRUE(ValidateCheckpointPath("job-1/step-100").ok());
  EXPECT_TRUE(ValidateCheckpointPath("job-1/step..100").ok());
  for (const char* bad : {"", "/etc/passwd", "..", "../x", "a/../../x", "a/.."}) {
    EXPECT_EQ(ValidateCheckpointPath(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace herd::coordinator
