#include "worker/train/checkpoint/training_state.h"

#include <gtest/gtest.h>

#include "worker/train/optim/optimizer_factory.h"
#include "common/spec_enums.h"

namespace herd {
namespace {

struct Replica {
  std::unique_ptr<Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Replica Build(uint64_t seed, const std::string& norm = "") {
  v1::ModelSpec spec;
  spec.set_name(norm.empty() ? "mlp" : "resnet_small");
  Replica r;
  if (norm.empty()) {
    r.model = std::move(*CreateModel(spec, ModelInputInfo{{8}, 3}, seed));
  } else {
    spec.add_widths(8);
    spec.set_norm(*ParseSpecName<v1::Norm>(norm, "model.norm"));
    r.model = std::move(*CreateModel(spec, ModelInputInfo{{1, 4, 4}, 3}, seed));
  }
  v1::OptimizerSpec opt;
  opt.set_name(v1::OPTIMIZER_NAME_SGD);
  opt.set_lr(0.1);
  opt.set_momentum(0.9);
  r.optimizer = std::move(*MakeOptimizer(opt, r.model->Parameters()));
  return r;
}

void Step(Replica& r, const Batch& batch) {
  r.optimizer->zero_grad();
  r.model->Forward(batch).loss.backward();
  r.optimizer->step();
}

TEST(TrainingState, RestoredReplicaContinuesIdentically) {
  torch::manual_seed(0);
  Batch batch{torch::randn({4, 8}), torch::randint(0, 3, {4}, torch::kLong)};
  Replica a = Build(1);
  Step(a, batch);
  Step(a, batch);  // momentum buffers are now non-trivial
  auto files = SerializeTrainingState(a.model.get(), a.optimizer.get(), TrainingPosition{7, 2, 640});
  ASSERT_TRUE(files.ok()) << files.status();

  Replica b = Build(2);  // different init: everything must come from the state
  TrainingPosition position;
  ASSERT_TRUE(RestoreTrainingState(*files, b.model.get(), b.optimizer.get(), &position).ok());
  EXPECT_EQ(position.step, 7);
  EXPECT_EQ(position.epoch, 2);
  EXPECT_EQ(position.samples_in_epoch, 640);
  // The random stream continues where the writer's was.
  const torch::Tensor after_restore = torch::rand({3});
  Step(a, batch);
  Step(b, batch);
  auto pa = a.model->Parameters(), pb = b.model->Parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "parameter " << i;
  ASSERT_TRUE(RestoreTrainingState(*files, b.model.get(), b.optimizer.get(), &position).ok());
  EXPECT_TRUE(torch::equal(torch::rand({3}), after_restore));
}

// Batch norm's running statistics travel with the parameters, by name; a
// state without them does not fit a model that has them.
TEST(TrainingState, ModelBuffersRoundTrip) {
  torch::manual_seed(0);
  Batch batch{torch::rand({4, 1, 4, 4}) + 1, torch::randint(0, 3, {4}, torch::kLong)};
  Replica a = Build(1, "batch");
  Step(a, batch);
  Step(a, batch);
  auto files = SerializeTrainingState(a.model.get(), a.optimizer.get(), TrainingPosition{2, 0, 8});
  ASSERT_TRUE(files.ok()) << files.status();
  Replica b = Build(1, "batch");  // fresh running statistics
  TrainingPosition position;
  ASSERT_TRUE(RestoreTrainingState(*files, b.model.get(), b.optimizer.get(), &position).ok());
  const auto buffers_a = a.model->NamedBuffers();
  const auto buffers_b = b.model->NamedBuffers();
  ASSERT_EQ(buffers_a.size(), buffers_b.size());
  for (size_t i = 0; i < buffers_a.size(); ++i) {
    EXPECT_TRUE(torch::equal(buffers_a[i].second, buffers_b[i].second)) << buffers_a[i].first;
  }
  EXPECT_EQ(b.model->NamedBuffers()[2].second.item<int64_t>(), 2);  // num_batches_tracked
  // group norm has no buffers: its state lacks what a batch-norm model needs.
  Replica g = Build(1, "group");
  auto no_buffers = SerializeTrainingState(g.model.get(), g.optimizer.get(), TrainingPosition{});
  ASSERT_TRUE(no_buffers.ok());
  const absl::Status lacking = RestoreTrainingState(*no_buffers, b.model.get(), b.optimizer.get(), &position);
  EXPECT_EQ(lacking.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(lacking.message().find("lacks buffer stem_norm.running_mean"), std::string::npos) << lacking;
}

TEST(TrainingState, OuterOptimizerStateRoundTrips) {
  Replica a = Build(1);
  const std::vector<torch::Tensor> outer = {torch::arange(5, torch::kFloat), torch::full({3}, 0.25)};
  auto files = SerializeTrainingState(a.model.get(), a.optimizer.get(), TrainingPosition{}, outer);
  ASSERT_TRUE(files.ok());
  ASSERT_TRUE(files->count("outer.pt"));
  std::vector<torch::Tensor> restored;
  TrainingPosition position;
  ASSERT_TRUE(RestoreTrainingState(*files, a.model.get(), a.optimizer.get(), &position, &restored).ok());
  ASSERT_EQ(restored.size(), 2u);
  EXPECT_TRUE(torch::equal(restored[0], outer[0]));
  EXPECT_TRUE(torch::equal(restored[1], outer[1]));
  // A state written without an outer optimizer restores none.
  auto plain = SerializeTrainingState(a.model.get(), a.optimizer.get(), TrainingPosition{});
  ASSERT_TRUE(RestoreTrainingState(*plain, a.model.get(), a.optimizer.get(), &position, &restored).ok());
  EXPECT_TRUE(restored.empty());
}

TEST(TrainingState, MismatchedStateIsRejected) {
  Replica a = Build(1);
  auto files = SerializeTrainingState(a.model.get(), a.optimizer.get(), TrainingPosition{});
  ASSERT_TRUE(files.ok());
  v1::ModelSpec spec;
  spec.set_name("mlp");
  auto other = std::move(*CreateModel(spec, ModelInputInfo{{16}, 3}, 1));  // wider input
  v1::OptimizerSpec opt;
  opt.set_name(v1::OPTIMIZER_NAME_SGD);
  opt.set_lr(0.1);
  auto optimizer = std::move(*MakeOptimizer(opt, other->Parameters()));
  TrainingPosition position;
  auto status = RestoreTrainingState(*files, other.get(), optimizer.get(), &position);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("shape"), std::string::npos) << status;
  files->erase("optimizer.pt");
  EXPECT_FALSE(RestoreTrainingState(*files, a.model.get(), a.optimizer.get(), &position).ok());
}

}  // namespace
}  // namespace herd
