// A whole training step captured as a CUDA graph against the same step run
// eagerly, step by step, on the GPU (part of scripts/gpu_check.sh; the GPU
// cases skip without the CUDA build and a GPU, which fails a cuda check).
// The step is the trainer's: an MLP's forward and cross entropy, backward,
// clipping by global norm on the device, the fused optimizer step (Adam,
// AdamW, SGD with momentum, from the job's optimizer factory; fp32, and the
// forward under bf16 autocast with Adam and SGD) with a
// learning rate that changes every step, batches from pinned host memory,
// an epoch's short last batch run eagerly between replays, and a re-capture
// for a lasting change of the batch's rows after replays. Both runs
// launch the same kernels on the same values (the graph's learning rate, a
// float32 device scalar, is cast to float by the kernels as a double rate
// is), so parameters, loss, gradient norm and step counts must be bitwise
// equal after every step.
#include "worker/train/graphed_step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "worker/train/optim/fused_optimizer.h"
#include "worker/train/optim/grad_clip.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/step/autocast.h"

namespace herd {
namespace {

constexpr int64_t kFeatures = 20;
constexpr int64_t kClasses = 5;

bool HaveGpu() { return CudaGraphsBuilt() && torch::cuda::is_available(); }

struct TrainRun {
  torch::nn::Sequential model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  FusedOptimizerStep fused;
  bool bf16 = false;  // the forward under bf16 autocast (bf16_autocast)
};

v1::OptimizerSpec SpecOf(const std::string& kind) {
  v1::OptimizerSpec spec;
  spec.set_lr(0.01);
  if (kind == "sgd" || kind == "sgd_bf16") {
    spec.set_name(v1::OPTIMIZER_NAME_SGD);
    spec.set_momentum(0.9);
  } else {
    spec.set_name(kind == "adam" || kind == "adam_bf16" ? v1::OPTIMIZER_NAME_ADAM : v1::OPTIMIZER_NAME_ADAMW);
    spec.set_weight_decay(0.01);
  }
  return spec;
}

void MakeRun(const std::string& kind, const torch::Device& device, TrainRun* run) {
  torch::manual_seed(7);  // both runs start from the same weights
  run->model = torch::nn::Sequential(torch::nn::Linear(kFeatures, 64), torch::nn::ReLU(),
                                     torch::nn::Linear(64, kClasses));
  run->model->to(device);
  auto optimizer = MakeOptimizer(SpecOf(kind), run->model->parameters());
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  run->optimizer = *std::move(optimizer);
  run->bf16 = kind.size() > 5 && kind.substr(kind.size() - 5) == "_bf16";
}

// The trainer's step on one batch; `device_lr` undefined: the rate from the options.
GraphedOutputs TrainStep(TrainRun& run, const torch::Tensor& x, const torch::Tensor& y, double lr,
                         const torch::Tensor& device_lr) {
  for (auto& p : run.model->parameters()) p.mutable_grad() = torch::Tensor();
  const torch::Tensor loss = [&] {
    CudaBf16Autocast autocast(run.bf16);
    return torch::nn::functional::cross_entropy(run.model->forward(x), y);
  }();
  loss.backward();
  const torch::Tensor norm = ClipGradNormOnDevice(run.model->parameters(), 0.5);
  SetLearningRate(run.optimizer.get(), lr);
  if (!run.fused.Step(*run.optimizer, device_lr)) throw std::runtime_error("no fused optimizer step here");
  return {loss.detach(), norm};
}

std::vector<int64_t> CountsOf(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params) {
  const StepCounts counts = ReadStepCounts(optimizer);
  std::vector<int64_t> out;
  for (const auto& p : params) {
    int64_t step = -1;
    for (const auto& [key, value] : counts) {
      if (key == OptimizerStateKey(p)) step = value;
    }
    out.push_back(step);
  }
  return out;
}

void ExpectSame(TrainRun& eager, TrainRun& graphed, const GraphedOutputs& a, const GraphedOutputs& b, size_t step) {
  const auto pe = eager.model->parameters();
  const auto pg = graphed.model->parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    ASSERT_TRUE(torch::equal(pe[i], pg[i])) << "step " << step << " parameter " << i << ": max difference "
                                            << (pe[i] - pg[i]).abs().max().item<float>();
  }
  EXPECT_TRUE(torch::equal(a.loss, b.loss)) << "step " << step << ": loss";
  EXPECT_TRUE(torch::equal(a.grad_norm, b.grad_norm)) << "step " << step << ": gradient norm";
  EXPECT_EQ(CountsOf(*eager.optimizer, pe), CountsOf(*graphed.optimizer, pg)) << "step " << step;
}

class GraphedStepTest : public testing::TestWithParam<std::string> {};

TEST_P(GraphedStepTest, CapturedRunMatchesEagerRunBitwiseStepByStep) {
  if (!HaveGpu()) GTEST_SKIP() << "needs the CUDA build and a GPU";
  const torch::Device cuda(torch::kCUDA, 0);
  TrainRun eager;
  TrainRun graphed;
  MakeRun(GetParam(), cuda, &eager);
  MakeRun(GetParam(), cuda, &graphed);
  constexpr size_t kSteps = 16;
  constexpr size_t kWarmup = 2;
  constexpr size_t kShort = 8;  // an epoch's short last batch: eager, the graph kept
  constexpr size_t kResized = 11;  // from here on a lasting other size: captured again
  auto made = GraphedStep::Create(cuda, graphed.model->parameters());
  ASSERT_TRUE(made.ok()) << made.status();
  GraphedStep& step = **made;
  for (size_t i = 0; i < kSteps; ++i) {
    const int64_t rows = i == kShort ? 12 : i >= kResized ? 24 : 32;
    const Batch batch{torch::randn({rows, kFeatures}).pin_memory(), torch::randint(kClasses, {rows}).pin_memory()};
    const double lr = 0.01 * (1.0 + 0.25 * static_cast<double>(i));  // a schedule: no re-capture
    const torch::Tensor x = batch.inputs.to(cuda, /*non_blocking=*/true);
    const torch::Tensor y = batch.targets.to(cuda, /*non_blocking=*/true);
    const GraphedOutputs want = TrainStep(eager, x, y, lr, torch::Tensor());
    GraphedOutputs got;
    if (i < kWarmup || i == kShort) {
      got = TrainStep(graphed, x, y, lr, torch::Tensor());
    } else if (!step.captured() || i == kResized) {
      // Replays advanced the host's Adam counts behind the fused step's back.
      graphed.fused.CatchUp(*graphed.optimizer);
      const absl::Status s = step.Capture(batch, lr, *graphed.optimizer, [&](const Batch& in, const torch::Tensor& dlr) {
        return TrainStep(graphed, in.inputs, in.targets, lr, dlr);
      });
      ASSERT_TRUE(s.ok()) << s;
      got = step.outputs();
    } else {
      ASSERT_TRUE(step.Replay(batch, lr, *graphed.optimizer).ok());
      got = step.outputs();
    }
    ExpectSame(eager, graphed, want, got, i);
    if (HasFatalFailure()) return;
  }
  // Another batch shape is not this graph's: the trainer re-captures or runs eagerly instead.
  const Batch other{torch::zeros({3, kFeatures}).pin_memory(), torch::zeros({3}, torch::kLong).pin_memory()};
  EXPECT_FALSE(step.Replay(other, 0.01, *graphed.optimizer).ok());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, GraphedStepTest, testing::Values("adam", "adamw", "sgd", "adam_bf16", "sgd_bf16"));

// A step that reads the host cannot be captured: FAILED_PRECONDITION, the
// step counts as before, no gradients left over, and the eager step that
// follows matches a run that never tried.
TEST(GraphedStep, AFailedCaptureLeavesNothingOfTheStep) {
  if (!HaveGpu()) GTEST_SKIP() << "needs the CUDA build and a GPU";
  const torch::Device cuda(torch::kCUDA, 0);
  TrainRun eager;
  TrainRun graphed;
  MakeRun("adam", cuda, &eager);
  MakeRun("adam", cuda, &graphed);
  const Batch batch{torch::randn({16, kFeatures}).pin_memory(), torch::randint(kClasses, {16}).pin_memory()};
  const torch::Tensor x = batch.inputs.to(cuda);
  const torch::Tensor y = batch.targets.to(cuda);
  ExpectSame(eager, graphed, TrainStep(eager, x, y, 0.01, {}), TrainStep(graphed, x, y, 0.01, {}), 0);
  auto made = GraphedStep::Create(cuda, graphed.model->parameters());
  ASSERT_TRUE(made.ok()) << made.status();
  const auto counts = CountsOf(*graphed.optimizer, graphed.model->parameters());
  const absl::Status s = (*made)->Capture(batch, 0.01, *graphed.optimizer, [&](const Batch& in, const torch::Tensor& dlr) {
    GraphedOutputs out = TrainStep(graphed, in.inputs, in.targets, 0.01, dlr);
    if (out.loss.item<float>() < 0) out.loss = -out.loss;  // a host read: not capturable
    return out;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_FALSE((*made)->captured());
  EXPECT_EQ(CountsOf(*graphed.optimizer, graphed.model->parameters()), counts);
  for (const auto& p : graphed.model->parameters()) EXPECT_FALSE(p.grad().defined());
  ExpectSame(eager, graphed, TrainStep(eager, x, y, 0.02, {}), TrainStep(graphed, x, y, 0.02, {}), 1);
}

}  // namespace
}  // namespace herd
