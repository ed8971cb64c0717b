// The step loop never copies a device value to the host: the loss (and
// anything else a report needs) accumulates on the device and is read once
// per commit point, through HostReads. Pinned on CPU, where a read costs
// nothing, so that it stays true where one costs a GPU sync: whole trainers
// (two ranks as threads, Gloo over loopback) run N steps at log interval L
// and must read exactly N / L times; and the step's sources call no `.item`
// or `.cpu()` of their own.
#include "worker/train/step/host_reads.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "worker/train/generation_loop.h"
#include "worker/train/report/progress_reporter.h"
#include "worker/train/testing/in_process_coordinator.h"
#include "worker/train/training_context.h"

namespace herd {
namespace {

constexpr char kJob[] = "job-reads";

v1::JobSpec Spec(int64_t max_steps, int64_t log_interval, double grad_clip_norm) {
  v1::JobSpec spec;
  spec.set_name("host-reads");
  spec.mutable_model()->set_name("mlp");
  spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  spec.mutable_dataset()->set_synthetic_samples(4096);  // no epoch end within max_steps
  spec.mutable_dataset()->set_synthetic_features(8);
  spec.mutable_dataset()->set_synthetic_classes(3);
  spec.set_batch_size(8);
  spec.set_max_steps(max_steps);
  spec.set_log_interval_steps(log_interval);
  spec.set_grad_clip_norm(grad_clip_norm);
  spec.set_collective_timeout_seconds(30);
  spec.mutable_optimizer()->set_name(v1::OPTIMIZER_NAME_SGD);
  spec.mutable_optimizer()->set_lr(0.05);
  spec.mutable_eval()->set_max_samples(16);
  spec.mutable_sync()->set_same_host_transport(v1::SAME_HOST_TRANSPORT_TCP);  // thread ranks: Gloo over loopback
  ApplyJobDefaults(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

std::mutex& ComputeMutex() {
  static std::mutex mu;
  return mu;
}

// Runs the job on `world` thread ranks; each rank's HostReads count.
std::vector<int64_t> HostReadsPerRank(const v1::JobSpec& spec, int world) {
  static int runs = 0;
  const std::filesystem::path root = std::filesystem::path(testing::TempDir()) / absl::StrCat("reads-", ++runs);
  InProcessCoordinator coordinator(kJob, spec, /*seed=*/3);
  std::vector<std::string> workers;
  for (int r = 0; r < world; ++r) workers.push_back(absl::StrCat("w", r));
  coordinator.SetMembers(workers);
  std::vector<int64_t> reads(world, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      auto link = coordinator.Link(workers[r]);
      auto join = JoinWithin(link.get(), std::chrono::seconds(60));
      ASSERT_TRUE(join.ok()) << join.status();
      ProgressReporter reporter(link.get(), nullptr);
      TrainerOptions options;
      options.job_id = kJob;
      options.work_dir = (root / workers[r]).string();
      options.checkpoint_root = (root / "checkpoints").string();
      options.compute_mutex = &ComputeMutex();
      std::filesystem::create_directories(options.work_dir);
      auto context = TrainingContext::Create(join->spec(), static_cast<int64_t>(join->seed()), options, nullptr,
                                             nullptr, &reporter);
      ASSERT_TRUE(context.ok()) << context.status();
      GenerationLoopOptions loop;
      loop.join_timeout = std::chrono::seconds(60);
      const absl::Status status = RunGenerations(link.get(), context->get(), *join, loop).error;
      ASSERT_TRUE(status.ok()) << status;
      EXPECT_EQ((*context)->position().step, spec.max_steps());
      reads[r] = (*context)->host_reads().count();
    });
  }
  for (auto& t : threads) t.join();
  return reads;
}

TEST(HostReads, OneReadPerCommitPointAndNoneBetween) {
  // 12 steps, a commit point every 4: steps 4, 8 and 12 (the last); the
  // final report after the evaluation has no new steps to read.
  EXPECT_EQ(HostReadsPerRank(Spec(12, 4, 0), 2), (std::vector<int64_t>{3, 3}));
  // Clipping computes the gradient norm every step, on the device.
  EXPECT_EQ(HostReadsPerRank(Spec(12, 6, 1.0), 2), (std::vector<int64_t>{2, 2}));
}

TEST(HostReads, ReadsSeveralValuesInOneCopy) {
  HostReads reads;
  const std::vector<double> values = reads.Read({torch::tensor(1.5), torch::tensor(int64_t{7}), torch::tensor(-2.0f)});
  EXPECT_EQ(values, (std::vector<double>{1.5, 7, -2}));
  EXPECT_EQ(reads.count(), 1);
}

// The step's own files never read a device value but through HostReads: a
// stray `.item<double>()` in TrainStep would hold a GPU step up every step,
// and one in the captured step's glue would fail every capture.
TEST(HostReads, StepSourcesReadOnlyThroughTheSeam) {
  const std::regex host_read(R"(\.item\s*[<(]|\.cpu\s*\(|\.data_ptr\s*<|\.tolist\s*\()");
  for (const char* file : {"worker/train/trainer.cc", "worker/train/training_step.cc",
                           "worker/train/graphed_step.cc", "worker/train/sync/sync_strategy.cc"}) {
    std::ifstream in(file);
    ASSERT_TRUE(in.good()) << file << " is not a data dependency of this test";
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      EXPECT_FALSE(std::regex_search(line, host_read)) << file << ":" << number << " reads on the host: " << line;
    }
  }
}

}  // namespace
}  // namespace herd
