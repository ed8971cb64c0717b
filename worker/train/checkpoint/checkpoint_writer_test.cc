// The background checkpoint writer with real files: what it writes restores
// exactly (the state at Save, not what training did meanwhile), a second save
// waits for the first, its destructor waits for the write under way, and a
// storage failure comes back as the write's outcome.
#include "worker/train/checkpoint/checkpoint_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>

#include "worker/train/checkpoint/checkpoint_files.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/checkpoint/training_state.h"
#include "common/spec_enums.h"

namespace herd {
namespace {

namespace fs = std::filesystem;

v1::OptimizerSpec OptimizerSpecFor(const std::string& name) {
  v1::OptimizerSpec opt;
  opt.set_name(*ParseSpecName<v1::OptimizerName>(name, "optimizer.name"));
  opt.set_lr(0.05);
  opt.set_momentum(0.9);
  opt.set_beta1(0.9);
  opt.set_beta2(0.999);
  opt.set_eps(1e-8);
  return opt;
}

struct Training {
  std::unique_ptr<Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Training Make(const std::string& optimizer_name) {
  v1::ModelSpec spec;
  spec.set_name("mlp");
  Training s;
  s.model = *CreateModel(spec, ModelInputInfo{{16}, 4}, 3);
  s.optimizer = *MakeOptimizer(OptimizerSpecFor(optimizer_name), s.model->Parameters());
  return s;
}

void Step(Training& s, int seed) {
  torch::manual_seed(seed);
  Batch batch{torch::randn({8, 16}), torch::randint(0, 4, {8})};
  s.optimizer->zero_grad();
  s.model->Forward(batch).loss.backward();
  s.optimizer->step();
}

std::string Root() {
  const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::create_directories(root);
  return root;
}

CheckpointWriterOptions Options(const std::string& root, const std::string& optimizer_name) {
  CheckpointWriterOptions options;
  options.root = root;
  options.job_id = "job-1";
  options.make_optimizer = [spec = OptimizerSpecFor(optimizer_name)](std::vector<torch::Tensor> params) {
    return MakeOptimizer(spec, std::move(params));
  };
  return options;
}

// Opens once; every waiter passes from then on.
class Gate {
 public:
  void Open() { open_.set_value(); }
  void Pass() { opened_.wait(); }

 private:
  std::promise<void> open_;
  std::shared_future<void> opened_ = open_.get_future().share();
};

class AsyncCheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AsyncCheckpointTest, WrittenStateRestoresExactlyWhileTrainingMovesOn) {
  Training original = Make(GetParam());
  for (int i = 0; i < 3; ++i) Step(original, i);
  const torch::Tensor rng_at_save = at::detail::getDefaultCPUGenerator().get_state();
  Gate moved_on;
  CheckpointWriterOptions options = Options(Root(), GetParam());
  // The write starts only once training has changed the live state.
  options.before_write = [&](int64_t) { moved_on.Pass(); };
  CheckpointWriter writer(options);
  absl::Status saved = writer.Save(original.model.get(), original.optimizer.get(), {3, 0, 96}, {}, 7, 0.05);
  ASSERT_TRUE(saved.ok()) << saved;
  for (int i = 3; i < 5; ++i) Step(original, i);
  moved_on.Open();
  writer.Wait();
  auto outcomes = writer.TakeFinished();
  ASSERT_EQ(outcomes.size(), 1u);
  ASSERT_TRUE(outcomes[0].status.ok()) << outcomes[0].status;
  EXPECT_EQ(outcomes[0].folder.relative_path, "job-1/step-0000000003");

  auto files = ReadCheckpointFolder(options.root, outcomes[0].folder.relative_path);
  ASSERT_TRUE(files.ok()) << files.status();
  Training restored = Make(GetParam());
  Step(restored, 99);  // some other state to overwrite
  TrainingPosition position;
  ASSERT_TRUE(RestoreTrainingState(*files, restored.model.get(), restored.optimizer.get(), &position).ok());
  EXPECT_EQ(position.step, 3);
  EXPECT_EQ(position.samples_in_epoch, 96);
  EXPECT_TRUE(torch::equal(at::detail::getDefaultCPUGenerator().get_state(), rng_at_save));
  for (int i = 3; i < 5; ++i) Step(restored, i);
  const auto a = original.model->Parameters(), b = restored.model->Parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, AsyncCheckpointTest, ::testing::Values("sgd", "adam", "adamw"));

TEST(CheckpointWriter, SecondSaveWaitsForTheFirstWrite) {
  Training s = Make("adamw");
  Step(s, 0);
  Gate release_first;
  std::promise<void> first_started;
  std::mutex mu;
  std::vector<std::string> events;
  auto log = [&](const std::string& event) {
    std::lock_guard<std::mutex> lock(mu);
    events.push_back(event);
  };
  CheckpointWriterOptions options = Options(Root(), "adamw");
  options.before_write = [&](int64_t step) {
    log("write " + std::to_string(step));
    if (step == 1) {
      first_started.set_value();
      release_first.Pass();
    }
  };
  CheckpointWriter writer(options);
  absl::Status saved = writer.Save(s.model.get(), s.optimizer.get(), {1, 0, 8}, {}, 1, 0.05);
  ASSERT_TRUE(saved.ok()) << saved;
  first_started.get_future().wait();
  Step(s, 1);
  auto second = std::async(std::launch::async, [&] {
    absl::Status saved = writer.Save(s.model.get(), s.optimizer.get(), {2, 0, 16}, {}, 1, 0.05);
    log("save 2 returned");
    return saved;
  });
  // A save that did not wait would return at once and overwrite the copy
  // the first write is reading.
  EXPECT_EQ(second.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  log("first released");
  release_first.Open();
  ASSERT_TRUE(second.get().ok());
  writer.Wait();
  // Save 2 returned, and write 2 began, only after the first write was
  // released; between those two the writer thread and this one race, so
  // their order is not part of the contract.
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(events.begin(), events.begin() + 2),
            (std::vector<std::string>{"write 1", "first released"}));
  std::vector<std::string> after(events.begin() + 2, events.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, (std::vector<std::string>{"save 2 returned", "write 2"}));
  auto outcomes = writer.TakeFinished();
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].step, 1);
  EXPECT_EQ(outcomes[1].step, 2);
  for (const auto& outcome : outcomes) ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  // Each folder holds its own step's state.
  for (int64_t step : {1, 2}) {
    auto files = ReadCheckpointFolder(options.root, outcomes[step - 1].folder.relative_path);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_NE(files->at("position.txt").find("step " + std::to_string(step) + "\n"), std::string::npos);
  }
}

TEST(CheckpointWriter, DestructionWaitsForTheWriteUnderWay) {
  Training s = Make("sgd");
  Step(s, 0);
  Gate release;
  std::promise<void> started;
  CheckpointWriterOptions options = Options(Root(), "sgd");
  options.before_write = [&](int64_t) {
    started.set_value();
    release.Pass();
  };
  auto writer = std::make_unique<CheckpointWriter>(options);
  absl::Status saved = writer->Save(s.model.get(), s.optimizer.get(), {5, 0, 40}, {}, 1, 0.05);
  ASSERT_TRUE(saved.ok()) << saved;
  started.get_future().wait();
  auto destroyed = std::async(std::launch::async, [&] { writer.reset(); });
  EXPECT_EQ(destroyed.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  EXPECT_TRUE(ListCheckpointFolders(options.root, "job-1").empty()) << "nothing published before the release";
  release.Open();
  destroyed.get();
  // Once the writer is gone the checkpoint is complete on disk.
  auto folders = ListCheckpointFolders(options.root, "job-1");
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(folders[0].step, 5);
  EXPECT_TRUE(ReadCheckpointFolder(options.root, folders[0].relative_path).ok());
}

TEST(CheckpointWriter, StorageFailureIsTheWritesOutcome) {
  Training s = Make("sgd");
  Step(s, 0);
  const std::string root = Root();
  // The job's folder cannot be made: a file is in its place.
  std::ofstream(root + "/job-1") << "not a folder";
  CheckpointWriter writer(Options(root, "sgd"));
  absl::Status saved = writer.Save(s.model.get(), s.optimizer.get(), {10, 0, 80}, {}, 1, 0.05);
  ASSERT_TRUE(saved.ok()) << saved;
  writer.Wait();
  auto outcomes = writer.TakeFinished();
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].step, 10);
  EXPECT_FALSE(outcomes[0].status.ok());
  EXPECT_NE(outcomes[0].status.message().find("job-1"), std::string::npos) << outcomes[0].status;
  EXPECT_TRUE(writer.TakeFinished().empty()) << "each outcome is taken once";
}

}  // namespace
}  // namespace herd
