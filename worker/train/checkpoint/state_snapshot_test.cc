#include "worker/train/checkpoint/state_snapshot.h"

#include <gtest/gtest.h>

#include "worker/train/optim/optimizer_factory.h"
#include "common/spec_enums.h"

namespace herd {
namespace {

struct Training {
  std::unique_ptr<Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Training Make(const std::string& optimizer_name) {
  v1::ModelSpec spec;
  spec.set_name("mlp");
  Training s;
  s.model = *CreateModel(spec, ModelInputInfo{{16}, 4}, 3);
  v1::OptimizerSpec opt;
  opt.set_name(*ParseSpecName<v1::OptimizerName>(optimizer_name, "optimizer.name"));
  opt.set_lr(0.05);
  opt.set_momentum(0.9);
  opt.set_beta1(0.9);
  opt.set_beta2(0.999);
  opt.set_eps(1e-8);
  s.optimizer = *MakeOptimizer(opt, s.model->Parameters());
  return s;
}

void Step(Training& s, int seed) {
  torch::manual_seed(seed);
  Batch batch{torch::randn({8, 16}), torch::randint(0, 4, {8})};
  s.optimizer->zero_grad();
  s.model->Forward(batch).loss.backward();
  s.optimizer->step();
}

// A snapshot applied to a freshly built model and optimizer continues exactly
// like the original: parameters and optimizer state (momentum, Adam moments
// and step count) were copied, not aliased. Both kinds: kept on the model's
// device (a CPU trainer's commit) and on the host (a CUDA trainer's commit,
// a checkpoint's copy), whose Apply copies back onto the model's device.
class SnapshotTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(SnapshotTest, AppliedSnapshotContinuesBitwiseLikeTheOriginal) {
  const auto [optimizer_name, on_host] = GetParam();
  Training original = Make(optimizer_name);
  for (int i = 0; i < 3; ++i) Step(original, i);
  StateSnapshot snapshot(on_host);
  const std::vector<torch::Tensor> outer_state = {torch::full({3}, 7.0)};
  ASSERT_TRUE(snapshot.Capture(original.model.get(), original.optimizer.get(), {3, 0, 96}, outer_state).ok());
  // The original moves on; the snapshot must not follow it.
  for (int i = 3; i < 5; ++i) Step(original, i);

  Training restored = Make(optimizer_name);
  Step(restored, 99);  // some other state to overwrite
  TrainingPosition position;
  std::vector<torch::Tensor> outer;
  ASSERT_TRUE(snapshot.Apply(restored.model.get(), restored.optimizer.get(), &position, &outer).ok());
  EXPECT_EQ(position.step, 3);
  EXPECT_EQ(position.samples_in_epoch, 96);
  ASSERT_EQ(outer.size(), 1u);
  EXPECT_TRUE(torch::equal(outer[0], outer_state[0]));
  outer[0].fill_(0);  // a copy the caller owns, not the snapshot's
  std::vector<torch::Tensor> again;
  ASSERT_TRUE(snapshot.Apply(restored.model.get(), restored.optimizer.get(), &position, &again).ok());
  EXPECT_TRUE(torch::equal(again[0], outer_state[0]));
  for (int i = 3; i < 5; ++i) Step(restored, i);

  auto a = original.model->Parameters();
  auto b = restored.model->Parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << optimizer_name << " parameter " << i;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, SnapshotTest,
                         ::testing::Combine(::testing::Values("sgd", "adam", "adamw"), ::testing::Bool()));

TEST(StateSnapshot, RecapturingReusesBuffersButHoldsTheNewValues) {
  Training s = Make("sgd");
  Step(s, 1);
  StateSnapshot snapshot;
  ASSERT_TRUE(snapshot.Capture(s.model.get(), s.optimizer.get(), {1, 0, 0}, {torch::ones({3})}).ok());
  Step(s, 2);
  const auto at_two = s.model->Parameters()[0].clone();
  ASSERT_TRUE(snapshot.Capture(s.model.get(), s.optimizer.get(), {2, 0, 0}, {torch::full({3}, 2.0)}).ok());
  Step(s, 3);

  Training other = Make("sgd");
  TrainingPosition position;
  std::vector<torch::Tensor> outer;
  ASSERT_TRUE(snapshot.Apply(other.model.get(), other.optimizer.get(), &position, &outer).ok());
  EXPECT_EQ(position.step, 2);
  EXPECT_TRUE(torch::equal(other.model->Parameters()[0], at_two));
  ASSERT_EQ(outer.size(), 1u);
  EXPECT_TRUE(torch::equal(outer[0], torch::full({3}, 2.0)));
}

TEST(StateSnapshot, RefusesAModelOfAnotherShape) {
  Training s = Make("sgd");
  StateSnapshot snapshot;
  ASSERT_TRUE(snapshot.Capture(s.model.get(), s.optimizer.get(), {0, 0, 0}, {}).ok());
  v1::ModelSpec spec;
  spec.set_name("mlp");
  auto wider = *CreateModel(spec, ModelInputInfo{{32}, 4}, 3);
  v1::OptimizerSpec sgd;
  sgd.set_name(v1::OPTIMIZER_NAME_SGD);
  sgd.set_lr(0.1);
  auto optimizer = *MakeOptimizer(sgd, wider->Parameters());
  TrainingPosition position;
  std::vector<torch::Tensor> outer;
  EXPECT_EQ(snapshot.Apply(wider.get(), optimizer.get(), &position, &outer).code(), absl::StatusCode::kInvalidArgument);
}

// Batch norm's running statistics are in the snapshot, copied (not
// aliased): applying it brings back the values of the commit.
TEST(SnapshotBuffers, RunningStatisticsAreCapturedAndApplied) {
  v1::ModelSpec spec;
  spec.set_name("resnet_small");
  spec.add_widths(8);
  spec.set_norm(v1::NORM_BATCH);
  std::unique_ptr<Model> model = *CreateModel(spec, ModelInputInfo{{1, 4, 4}, 4}, 3);
  v1::OptimizerSpec opt;
  opt.set_name(v1::OPTIMIZER_NAME_SGD);
  opt.set_lr(0.05);
  auto optimizer = *MakeOptimizer(opt, model->Parameters());
  torch::manual_seed(1);
  const Batch batch{torch::rand({6, 1, 4, 4}) + 1, torch::randint(0, 4, {6})};
  model->Forward(batch);
  std::vector<torch::Tensor> committed;
  for (const auto& b : model->Buffers()) committed.push_back(b.clone());
  StateSnapshot snapshot;
  ASSERT_TRUE(snapshot.Capture(model.get(), optimizer.get(), {1, 0, 6}, {}).ok());
  model->Forward(batch);  // moves the running statistics on
  EXPECT_FALSE(torch::equal(model->Buffers()[0], committed[0]));
  TrainingPosition position;
  std::vector<torch::Tensor> outer;
  ASSERT_TRUE(snapshot.Apply(model.get(), optimizer.get(), &position, &outer).ok());
  const auto restored = model->Buffers();
  ASSERT_EQ(restored.size(), committed.size());
  for (size_t i = 0; i < restored.size(); ++i) EXPECT_TRUE(torch::equal(restored[i], committed[i])) << i;
}

}  // namespace
}  // namespace herd
