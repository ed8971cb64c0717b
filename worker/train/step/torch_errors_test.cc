#include "worker/train/step/torch_errors.h"

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <new>
#include <stdexcept>

#include "worker/data/data_error.h"

namespace herd {
namespace {

TrainingErrorContext StepContext() { return {"training step 7", "mlp", "cpu", 64, 3'000'000}; }

// A real allocation failure from LibTorch's allocator: far more than any
// address space holds, so it fails at once without touching memory.
TEST(TorchErrors, RealAllocationFailureIsOutOfMemoryAndFailsTheJob) {
  try {
    auto t = torch::empty({int64_t{1} << 50}, torch::kFloat32);
    FAIL() << "allocated " << t.numel() << " floats";
  } catch (const std::exception& e) {
    EXPECT_TRUE(IsOutOfMemory(e)) << e.what();
    const absl::Status status = TrainingError(e, StepContext());
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
    const std::string message(status.message());
    EXPECT_NE(message.find("out of memory at training step 7"), std::string::npos) << message;
    EXPECT_NE(message.find("model mlp"), std::string::npos) << message;
    EXPECT_NE(message.find("3.0 MB of parameters"), std::string::npos) << message;
    EXPECT_NE(message.find("batch_size 64"), std::string::npos) << message;
    EXPECT_NE(message.find("device cpu"), std::string::npos) << message;
    // The allocator's own figures (the bytes asked for) are kept, its backtrace is not.
    EXPECT_NE(message.find("4503599627370496"), std::string::npos) << message;
    EXPECT_EQ(message.find("frame #"), std::string::npos) << message;
  }
}

TEST(TorchErrors, BadAllocIsOutOfMemory) {
  EXPECT_TRUE(IsOutOfMemory(std::bad_alloc()));
  EXPECT_EQ(TrainingError(std::bad_alloc(), StepContext()).code(), absl::StatusCode::kResourceExhausted);
}

TEST(TorchErrors, OtherTorchErrorsStayMemberFailures) {
  try {
    auto a = torch::ones({2, 3});
    auto b = torch::ones({4, 5});
    auto c = torch::matmul(a, b);
    FAIL() << c.sizes();
  } catch (const std::exception& e) {
    EXPECT_FALSE(IsOutOfMemory(e)) << e.what();
    const absl::Status status = TrainingError(e, StepContext());
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
    EXPECT_EQ(std::string(status.message()).rfind("training step 7: ", 0), 0u) << status;
    // LibTorch's message is kept, its C++ backtrace is not.
    EXPECT_NE(status.message().find("mat1 and mat2 shapes cannot be multiplied"), std::string::npos) << status;
    EXPECT_EQ(status.message().find("frame #"), std::string::npos) << status;
  }
  EXPECT_EQ(TrainingError(std::runtime_error("boom"), StepContext()).code(), absl::StatusCode::kInternal);
}

TEST(TorchErrors, ModelContractErrorFailsTheJobNamingTheModel) {
  const absl::Status status = TrainingError(ModelContractError("its loss does not require grad"), StepContext());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(status.message(), "training step 7 (model mlp): its loss does not require grad");
}

// Bad bytes in the data read the same on every retry: the job fails at once.
TEST(TorchErrors, DataErrorFailsTheJobNamingTheStep) {
  const absl::Status status = TrainingError(DataError("dataset file /d/t.bin: token id 9 at byte offset 4"), StepContext());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(status.message(), "training step 7: dataset file /d/t.bin: token id 9 at byte offset 4");
}

// What a catch around the model's forward turns an exception into.
template <typename Exception>
absl::Status FromForward(const Exception& thrown, bool collective) {
  try {
    try {
      throw thrown;
    } catch (const std::exception& e) {
      RethrowForwardError(e, collective);
    }
  } catch (const std::exception& rethrown) {
    return TrainingError(rethrown, StepContext());
  }
  return absl::OkStatus();
}

// A user's TorchScript forward that raises: the job fails at once with the
// model's own message, not the interpreter's traceback.
TEST(TorchErrors, ForwardThatRaisesIsTheModelsErrorNamingItsMessage) {
  torch::jit::Module module("Raises");
  module.define(R"JIT(
def forward(self, x):
    assert bool(x.numel() < 0), "this model refuses to train"
    return x
)JIT");
  try {
    try {
      module.forward({torch::ones({2})});
      FAIL() << "forward returned";
    } catch (const std::exception& e) {
      RethrowForwardError(e, /*forward_is_collective=*/false);
    }
  } catch (const std::exception& rethrown) {
    const absl::Status status = TrainingError(rethrown, StepContext());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(std::string(status.message()).rfind("training step 7 (model mlp): forward raised: ", 0), 0u) << status;
    EXPECT_NE(status.message().find("this model refuses to train"), std::string::npos) << status;
    EXPECT_EQ(status.message().find("Traceback"), std::string::npos) << status;
  }
}

TEST(TorchErrors, ForwardErrorsFromOutsideTheModelStayWhatTheyWere) {
  // A forward that is a collective may fail because a peer did.
  EXPECT_EQ(FromForward(std::runtime_error("peer closed"), /*collective=*/true).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(FromForward(std::bad_alloc(), false).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(FromForward(std::runtime_error("CUDA error: an illegal memory access"), false).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(FromForward(std::runtime_error("shape mismatch"), false).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd
