#include "worker/train/optim/optimizer_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/rmsprop.h>
#include <torch/serialize/archive.h>

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "worker/comm/testing/gloo_test_ranks.h"
#include "worker/train/optim/optimizer_factory.h"
#include "worker/train/optim/sharded_optimizer.h"
#include "worker/train/step/torch_compat.h"

namespace herd {
namespace {

using OptimizerMaker = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct OptimizerCase {
  std::string name;
  OptimizerKind kind;
  size_t live_tensors;  // state tensors a parameter has after a step
  OptimizerMaker make;
};

// Every optimizer herd builds (optimizer_factory.h), and Adam with amsgrad,
// whose extra tensor the state description also covers.
OptimizerMaker FromSpec(v1::OptimizerName name) {
  return [name](std::vector<torch::Tensor> params) {
    v1::OptimizerSpec spec;
    spec.set_name(name);
    spec.set_lr(0.05);
    spec.set_momentum(0.9);
    spec.set_beta1(0.9);
    spec.set_beta2(0.999);
    spec.set_eps(1e-8);
    spec.set_weight_decay(0.01);
    return std::move(*MakeOptimizer(spec, std::move(params)));
  };
}

std::vector<OptimizerCase> Cases() {
  return {
      {"sgd", OptimizerKind::kSgd, 1, FromSpec(v1::OPTIMIZER_NAME_SGD)},
      {"adam", OptimizerKind::kAdam, 2, FromSpec(v1::OPTIMIZER_NAME_ADAM)},
      {"adamw", OptimizerKind::kAdamW, 2, FromSpec(v1::OPTIMIZER_NAME_ADAMW)},
      {"adam_amsgrad", OptimizerKind::kAdam, 3,
       [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
         return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01).amsgrad(true));
       }},
  };
}

// Deterministic without the global RNG (rank threads share it); parameter
// 1 is stored channels-last, as mnist_cnn's conv weights are.
std::vector<torch::Tensor> MakeParams() {
  std::vector<torch::Tensor> params;
  for (int64_t n : {40, 6, 17}) {
    params.push_back(torch::sin(torch::arange(n * 3, torch::kFloat).reshape({n, 3}) * 0.37 + static_cast<double>(n)));
  }
  params.insert(params.begin() + 1, torch::cos(torch::arange(2 * 3 * 4 * 5, torch::kFloat).reshape({2, 3, 4, 5}) * 0.29)
                                        .contiguous(at::MemoryFormat::ChannelsLast));
  for (auto& p : params) p.requires_grad_(true);
  return params;
}

void SetGradients(const std::vector<torch::Tensor>& params, int step) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = torch::sin(params[i].detach() * (step + 1) + static_cast<double>(i));
  }
}

void Train(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params, int from, int to) {
  for (int step = from; step < to; ++step) {
    SetGradients(params, step);
    optimizer.step();
  }
}

ParamState StateOf(torch::optim::Optimizer& optimizer, const torch::Tensor& param) {
  auto found = optimizer.state().find(OptimizerStateKey(param));
  EXPECT_NE(found, optimizer.state().end());
  auto state = ReadParamState(*found->second);
  EXPECT_TRUE(state.ok()) << state.status();
  return *state;
}

// Same kind, step and tensors (defined alike, bitwise equal values).
void ExpectSameState(const ParamState& got, const ParamState& want, const std::string& where) {
  EXPECT_EQ(got.kind, want.kind) << where;
  EXPECT_EQ(got.step, want.step) << where;
  ASSERT_EQ(got.tensors.size(), want.tensors.size()) << where;
  for (size_t t = 0; t < want.tensors.size(); ++t) {
    ASSERT_EQ(got.tensors[t].defined(), want.tensors[t].defined()) << where << " " << StateTensorNames(want.kind)[t];
    if (want.tensors[t].defined()) {
      EXPECT_TRUE(torch::equal(got.tensors[t], want.tensors[t])) << where << " " << StateTensorNames(want.kind)[t];
    }
  }
}

// What Optimizer::save writes: the checkpoint's optimizer.pt.
std::string SavedBytes(torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

class OptimizerStateTest : public testing::TestWithParam<OptimizerCase> {};

// The description matches what LibTorch's own step leaves: the kind, the
// step count, the live tensors shaped, typed and laid out like the
// parameter, the others undefined; its bytes are what OptimizerStateBytes counts.
TEST_P(OptimizerStateTest, DescribesWhatLibTorchsStepLeaves) {
  const OptimizerCase& c = GetParam();
  auto params = MakeParams();
  auto optimizer = c.make(params);
  auto spec = StateSpecOf(optimizer->param_groups().front().options());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kind, c.kind);
  EXPECT_EQ(spec->live_tensors, c.live_tensors);
  Train(*optimizer, params, 0, 3);
  int64_t bytes = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamState state = StateOf(*optimizer, params[i]);
    EXPECT_EQ(state.kind, c.kind);
    EXPECT_EQ(state.step, CountsSteps(c.kind) ? 3 : 0) << i;
    ASSERT_EQ(state.tensors.size(), StateTensorNames(c.kind).size());
    for (size_t t = 0; t < state.tensors.size(); ++t) {
      const std::string where = absl::StrCat("parameter ", i, " ", StateTensorNames(c.kind)[t]);
      ASSERT_EQ(state.tensors[t].defined(), t < c.live_tensors) << where;
      if (t >= c.live_tensors) continue;
      EXPECT_EQ(state.tensors[t].sizes(), params[i].sizes()) << where;
      EXPECT_EQ(state.tensors[t].strides(), params[i].strides()) << where;
      EXPECT_EQ(state.tensors[t].dtype(), params[i].dtype()) << where;
      bytes += static_cast<int64_t>(state.tensors[t].nbytes());
    }
  }
  EXPECT_EQ(OptimizerStateBytes(*optimizer), bytes);
}

// A first state as LibTorch's first step makes it: live tensors like the
// parameter (memory layout included), zero where asked, step 0.
TEST_P(OptimizerStateTest, NewStateIsShapedLikeItsParameter) {
  const OptimizerCase& c = GetParam();
  auto params = MakeParams();
  auto optimizer = c.make(params);
  const OptimizerStateSpec spec = *StateSpecOf(optimizer->param_groups().front().options());
  const torch::Tensor& channels_last = params[1];
  const ParamState state = NewParamState(spec, channels_last, /*zeroed=*/true);
  EXPECT_EQ(state.kind, c.kind);
  EXPECT_EQ(state.step, 0);
  ASSERT_EQ(state.tensors.size(), StateTensorNames(c.kind).size());
  for (size_t t = 0; t < state.tensors.size(); ++t) {
    ASSERT_EQ(state.tensors[t].defined(), t < c.live_tensors) << t;
    if (t >= c.live_tensors) continue;
    EXPECT_EQ(state.tensors[t].strides(), channels_last.strides()) << t;
    EXPECT_TRUE(torch::equal(state.tensors[t], torch::zeros_like(channels_last))) << t;
  }
}

// The snapshot's use: a deep copy read out of one optimizer and written into
// another built alike restores it exactly, a copy, not an alias: the same
// next steps; and what it writes is LibTorch's own state, which
// Optimizer::save and load (the checkpoint's optimizer.pt) carry whole.
TEST_P(OptimizerStateTest, CopiedStateRoundTripsBitwise) {
  const OptimizerCase& c = GetParam();
  auto params = MakeParams();
  auto optimizer = c.make(params);
  Train(*optimizer, params, 0, 3);
  auto restored_params = MakeParams();
  auto restored = c.make(restored_params);
  Train(*restored, restored_params, 7, 8);  // other state, to be overwritten
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      restored_params[i].copy_(params[i]);
      const ParamState copy =
          MapStateTensors(StateOf(*optimizer, params[i]), [](const torch::Tensor& t) { return t.clone(); });
      WriteParamState(copy, &restored->state()[OptimizerStateKey(restored_params[i])]);
    }
  }
  auto loaded_params = MakeParams();
  auto loaded = c.make(loaded_params);
  {
    const std::string bytes = SavedBytes(*restored);
    torch::serialize::InputArchive archive;
    archive.load_from(bytes.data(), bytes.size());
    loaded->load(archive);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    ExpectSameState(StateOf(*loaded, loaded_params[i]), StateOf(*optimizer, params[i]),
                    absl::StrCat("saved and loaded, parameter ", i));
  }
  Train(*optimizer, params, 3, 5);
  Train(*restored, restored_params, 3, 5);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(restored_params[i], params[i])) << "parameter " << i;
    ExpectSameState(StateOf(*restored, restored_params[i]), StateOf(*optimizer, params[i]),
                    absl::StrCat("parameter ", i));
  }
}

// Writing reuses LibTorch's state object of the same kind (the snapshot
// keeps its buffers across captures) and replaces one of another kind.
TEST_P(OptimizerStateTest, WriteReusesTheObjectOfItsKind) {
  const OptimizerCase& c = GetParam();
  auto params = MakeParams();
  auto optimizer = c.make(params);
  Train(*optimizer, params, 0, 2);
  auto& slot = optimizer->state()[OptimizerStateKey(params[0])];
  const auto* before = slot.get();
  ParamState state = StateOf(*optimizer, params[0]);
  state.step = 41;
  WriteParamState(state, &slot);
  EXPECT_EQ(slot.get(), before);
  EXPECT_EQ(StateOf(*optimizer, params[0]).step, CountsSteps(c.kind) ? 41 : 0);
  const OptimizerKind other = c.kind == OptimizerKind::kSgd ? OptimizerKind::kAdamW : OptimizerKind::kSgd;
  WriteParamState(NewParamState(OptimizerStateSpec{other, 1}, params[0], true), &slot);
  EXPECT_EQ(ReadParamState(*slot)->kind, other);
}

// ZeRO-1's use: state sharded over three ranks (each steps its pieces, cut
// from and gathered back into whole state through this description) equals
// the unsharded optimizer's on every rank, bitwise, step counts included.
TEST_P(OptimizerStateTest, ShardedThenGatheredEqualsTheUnshardedState) {
  const OptimizerCase& c = GetParam();
  constexpr int kWorld = 3;
  auto reference_params = MakeParams();
  auto reference = c.make(reference_params);
  Train(*reference, reference_params, 0, 4);
  RunGlooRanks(kWorld, [&](int rank, Communicator* comm) {
    auto params = MakeParams();
    auto optimizer = c.make(params);
    auto shards = OptimizerShards::Create(params, comm);
    ASSERT_TRUE(shards.ok()) << shards.status();
    for (int step = 0; step < 4; ++step) {
      {
        std::lock_guard<std::mutex> lock(RankComputeMutex());
        SetGradients(params, step);
        ASSERT_TRUE((*shards)->StepOwnRange(*optimizer).ok());
      }
      ASSERT_TRUE((*shards)->ShareParameters().ok());
    }
    ASSERT_TRUE((*shards)->GatherState(*optimizer).ok());
    EXPECT_EQ(optimizer->state().size(), params.size()) << "rank " << rank;
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i], reference_params[i])) << "rank " << rank << " parameter " << i;
      ExpectSameState(StateOf(*optimizer, params[i]), StateOf(*reference, reference_params[i]),
                      absl::StrCat("rank ", rank, " parameter ", i));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Optimizers, OptimizerStateTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<OptimizerCase>& info) { return info.param.name; });

// SGD without momentum keeps no state at all; its spec still names the buffer.
TEST(OptimizerState, SgdWithoutMomentumKeepsNone) {
  auto params = MakeParams();
  v1::OptimizerSpec spec;
  spec.set_name(v1::OPTIMIZER_NAME_SGD);
  spec.set_lr(0.1);
  auto optimizer = *MakeOptimizer(spec, params);
  Train(*optimizer, params, 0, 2);
  EXPECT_TRUE(optimizer->state().empty());
  EXPECT_EQ(OptimizerStateBytes(*optimizer), 0);
  EXPECT_EQ(StateTensorNames(OptimizerKind::kSgd), std::vector<std::string>{"momentum_buffer"});
}

TEST(OptimizerState, UnsupportedOptimizerIsNamed) {
  auto spec = StateSpecOf(torch::optim::RMSpropOptions(0.1));
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(spec.status().message().find("sgd, adam and adamw"), std::string::npos) << spec.status();
  auto params = MakeParams();
  torch::optim::RMSprop rmsprop(params, torch::optim::RMSpropOptions(0.1));
  Train(rmsprop, params, 0, 1);
  auto state = ReadParamState(*rmsprop.state().begin()->second);
  EXPECT_EQ(state.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace herd
