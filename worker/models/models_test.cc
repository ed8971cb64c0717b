#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "worker/models/model.h"

namespace herd {
namespace {

v1::ModelSpec Spec(const std::string& name, const std::string& path = "") {
  v1::ModelSpec spec;
  spec.set_name(name);
  spec.set_path(path);
  return spec;
}

struct BuiltinCase {
  std::string name;
  std::vector<int64_t> sample_shape;
  int64_t classes;
  bool tokens;  // int64 token inputs and per-position targets
};

std::ostream& operator<<(std::ostream& os, const BuiltinCase& c) { return os << c.name; }

Batch TinyBatch(const BuiltinCase& c, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), c.sample_shape.begin(), c.sample_shape.end());
  if (c.tokens) return Batch{torch::randint(c.classes, shape), torch::randint(c.classes, shape)};
  return Batch{torch::rand(shape), torch::randint(c.classes, {n})};
}

void SgdStep(Model& model, double lr) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : model.Parameters()) {
    ASSERT_TRUE(p.grad().defined());
    p.sub_(p.grad() * lr);
    p.mutable_grad() = torch::Tensor();
  }
}

class BuiltinModelTest : public ::testing::TestWithParam<BuiltinCase> {};

TEST_P(BuiltinModelTest, ShapesFiniteLossAndOneSgdStepLowersTheLoss) {
  const BuiltinCase& c = GetParam();
  auto model = CreateModel(Spec(c.name), ModelInputInfo{c.sample_shape, c.classes}, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->name(), c.name);
  (*model)->SetTraining(true);
  (*model)->To(torch::kCPU);
  const Batch batch = TinyBatch(c, 4, 3);

  ModelOutput out = (*model)->Forward(batch);
  std::vector<int64_t> logits_shape = {4};
  if (c.tokens) logits_shape.push_back(c.sample_shape[0]);
  logits_shape.push_back(c.classes);
  EXPECT_EQ(out.logits.sizes().vec(), logits_shape);
  ASSERT_EQ(out.loss.dim(), 0);
  const double before = out.loss.item<double>();
  EXPECT_TRUE(std::isfinite(before));
  // An untrained classifier is near chance: loss about log(C).
  EXPECT_NEAR(before, std::log(static_cast<double>(c.classes)), 2.0);

  out.loss.backward();
  SgdStep(**model, 0.01);
  const double after = (*model)->Forward(batch).loss.item<double>();
  EXPECT_LT(after, before);
}

TEST_P(BuiltinModelTest, EmptyBatchGivesZeroLossAndZeroGradients) {
  const BuiltinCase& c = GetParam();
  auto model = CreateModel(Spec(c.name), ModelInputInfo{c.sample_shape, c.classes}, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  ModelOutput out = (*model)->Forward(TinyBatch(c, 0, 1));
  EXPECT_EQ(out.loss.item<double>(), 0.0);
  out.loss.backward();
  for (const torch::Tensor& p : (*model)->Parameters()) {
    if (p.grad().defined()) {
      EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
    }
  }
}

TEST_P(BuiltinModelTest, SameSeedSameParametersDifferentSeedDifferent) {
  const BuiltinCase& c = GetParam();
  const ModelInputInfo info{c.sample_shape, c.classes};
  auto a = CreateModel(Spec(c.name), info, 42);
  torch::manual_seed(999);  // global random state must not matter
  auto b = CreateModel(Spec(c.name), info, 42);
  auto other = CreateModel(Spec(c.name), info, 43);
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  auto pa = (*a)->NamedParameters(), pb = (*b)->NamedParameters(), po = (*other)->NamedParameters();
  ASSERT_EQ(pa.size(), pb.size());
  ASSERT_EQ((*a)->Parameters().size(), pa.size());
  bool any_differs = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_TRUE(pa[i].second.equal(pb[i].second)) << pa[i].first;
    EXPECT_TRUE((*a)->Parameters()[i].is_same(pa[i].second)) << "Parameters() and NamedParameters() disagree";
    any_differs = any_differs || !pa[i].second.equal(po[i].second);
  }
  EXPECT_TRUE(any_differs);
}

// The equivalence contract (W workers x batch b == 1 worker x batch W*b)
// needs each sample's output to ignore its batch mates even in training mode:
// why resnet_small uses GroupNorm, not BatchNorm.
TEST_P(BuiltinModelTest, OutputsDoNotDependOnBatchMates) {
  const BuiltinCase& c = GetParam();
  auto model = CreateModel(Spec(c.name), ModelInputInfo{c.sample_shape, c.classes}, 1);
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->SetTraining(true);
  const Batch batch = TinyBatch(c, 4, 7);
  const torch::Tensor together = (*model)->Forward(batch).logits;
  const torch::Tensor alone = (*model)->Forward(Batch{batch.inputs.narrow(0, 1, 1), batch.targets.narrow(0, 1, 1)}).logits;
  EXPECT_TRUE(torch::allclose(together.narrow(0, 1, 1), alone, 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(
    Builtins, BuiltinModelTest,
    ::testing::Values(BuiltinCase{"mlp", {1, 28, 28}, 10, false}, BuiltinCase{"mlp", {20}, 3, false},
                      BuiltinCase{"mnist_cnn", {1, 28, 28}, 10, false},
                      BuiltinCase{"resnet_small", {1, 28, 28}, 10, false},
                      BuiltinCase{"resnet_small", {3, 16, 16}, 5, false},
                      BuiltinCase{"char_transformer", {16}, 40, true}),
    [](const ::testing::TestParamInfo<BuiltinCase>& info) {
      return info.param.name + "_" + std::to_string(info.index);
    });

int64_t CountParameters(Model& model) {
  int64_t n = 0;
  for (const torch::Tensor& p : model.Parameters()) n += p.numel();
  return n;
}

TEST(ModelTest, MlpAndCnnMatchTheDdpBaseline) {
  const ModelInputInfo fashion{{1, 28, 28}, 10};
  auto mlp = CreateModel(Spec("mlp"), fashion, 0);
  auto cnn = CreateModel(Spec("mnist_cnn"), fashion, 0);
  ASSERT_TRUE(mlp.ok() && cnn.ok());
  // Parameter counts of ddp_baseline.py's MLP and CNN.
  EXPECT_EQ(CountParameters(**mlp), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
  EXPECT_EQ(CountParameters(**cnn), 32 * 9 + 32 + 64 * 32 * 9 + 64 + 9216 * 128 + 128 + 128 * 10 + 10);
  auto named = (*mlp)->NamedParameters();
  EXPECT_EQ(named.front().first, "net.1.weight");
  EXPECT_EQ(named.back().first, "net.5.bias");
  EXPECT_EQ((*cnn)->NamedParameters().front().first, "c1.weight");
  // LibTorch's default Linear initialization: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  const torch::Tensor w = named.front().second;
  const double bound = 1.0 / std::sqrt(784.0);
  EXPECT_LE(w.abs().max().item<double>(), bound);
  EXPECT_GT(w.abs().max().item<double>(), 0.99 * bound);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 1e-3);
}

// model.hidden / width / heads / layers / context / widths size the models.
TEST(ModelTest, SizedModelsHaveTheAskedShapesAndTrain) {
  v1::ModelSpec mlp = Spec("mlp");
  for (int64_t h : {64, 32, 16}) mlp.add_hidden(h);
  auto sized_mlp = CreateModel(mlp, ModelInputInfo{{20}, 3}, 0);
  ASSERT_TRUE(sized_mlp.ok()) << sized_mlp.status();
  EXPECT_EQ(CountParameters(**sized_mlp), 20 * 64 + 64 + 64 * 32 + 32 + 32 * 16 + 16 + 16 * 3 + 3);
  // The sizes, defaults resolved, go into the safetensors metadata (herd_config).
  EXPECT_EQ((*sized_mlp)->Config(), R"({"hidden": [64, 32, 16]})");
  EXPECT_EQ((*CreateModel(Spec("mlp"), ModelInputInfo{{20}, 3}, 0))->Config(), R"({"hidden": [1024, 1024]})");

  v1::ModelSpec transformer = Spec("char_transformer");
  transformer.set_width(48);
  transformer.set_heads(3);
  transformer.set_layers(3);
  transformer.set_context(32);
  auto sized_transformer = CreateModel(transformer, ModelInputInfo{{16}, 40}, 0);
  ASSERT_TRUE(sized_transformer.ok()) << sized_transformer.status();
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, p] : (*sized_transformer)->NamedParameters()) shapes[name] = p.sizes().vec();
  EXPECT_EQ(shapes["token_embedding.weight"], (std::vector<int64_t>{40, 48}));
  EXPECT_EQ(shapes["position_embedding.weight"], (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(shapes.count("block3.fc1.weight"), 1u);
  EXPECT_EQ(shapes.count("block4.fc1.weight"), 0u);
  const Batch tokens = TinyBatch(BuiltinCase{"char_transformer", {16}, 40, true}, 2, 5);
  EXPECT_EQ((*sized_transformer)->Forward(tokens).logits.sizes().vec(), (std::vector<int64_t>{2, 16, 40}));
  EXPECT_EQ((*sized_transformer)->Config(),
            R"({"vocab_size": 40, "context": 32, "width": 48, "heads": 3, "layers": 3})");
  EXPECT_EQ((*CreateModel(Spec("char_transformer"), ModelInputInfo{{16}, 256}, 0))->Config(),
            R"({"vocab_size": 256, "context": 16, "width": 128, "heads": 4, "layers": 2})");

  v1::ModelSpec resnet = Spec("resnet_small");
  resnet.add_widths(8);
  resnet.add_widths(24);
  auto sized_resnet = CreateModel(resnet, ModelInputInfo{{1, 12, 12}, 5}, 0);
  ASSERT_TRUE(sized_resnet.ok()) << sized_resnet.status();
  std::map<std::string, std::vector<int64_t>> resnet_shapes;
  for (const auto& [name, p] : (*sized_resnet)->NamedParameters()) resnet_shapes[name] = p.sizes().vec();
  EXPECT_EQ(resnet_shapes["fc.weight"], (std::vector<int64_t>{5, 24}));
  EXPECT_EQ(resnet_shapes.count("stage2_block2.conv1.weight"), 1u);
  EXPECT_EQ(resnet_shapes.count("stage3_block1.conv1.weight"), 0u);
  const Batch images = TinyBatch(BuiltinCase{"resnet_small", {1, 12, 12}, 5, false}, 2, 5);
  EXPECT_EQ((*sized_resnet)->Forward(images).logits.sizes().vec(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ((*sized_resnet)->Config(), R"({"widths": [8, 24], "norm": "group"})");
  EXPECT_EQ((*CreateModel(Spec("mnist_cnn"), ModelInputInfo{{1, 28, 28}, 10}, 0))->Config(), "{}");

  // What the spec check cannot know without the data is refused at build.
  transformer.set_context(8);
  auto short_context = CreateModel(transformer, ModelInputInfo{{16}, 40}, 0);
  ASSERT_FALSE(short_context.ok());
  EXPECT_EQ(short_context.status().message().rfind("model.context:", 0), 0u) << short_context.status();
}

// model.vocab_size sizes the embedding and the head beyond the dataset's
// vocabulary (a padded table); a smaller one could not embed every id.
TEST(ModelTest, CharTransformerVocabSize) {
  v1::ModelSpec transformer = Spec("char_transformer");
  transformer.set_width(16);
  transformer.set_heads(2);
  transformer.set_vocab_size(1000);
  auto padded = CreateModel(transformer, ModelInputInfo{{8}, 700}, 0);
  ASSERT_TRUE(padded.ok()) << padded.status();
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, p] : (*padded)->NamedParameters()) shapes[name] = p.sizes().vec();
  EXPECT_EQ(shapes["token_embedding.weight"], (std::vector<int64_t>{1000, 16}));
  EXPECT_EQ(shapes["head.weight"], (std::vector<int64_t>{1000, 16}));
  const torch::Tensor ids = torch::full({2, 8}, 699, torch::kLong);
  EXPECT_EQ((*padded)->Forward(Batch{ids, ids}).logits.sizes().vec(), (std::vector<int64_t>{2, 8, 1000}));

  transformer.set_vocab_size(500);
  auto too_small = CreateModel(transformer, ModelInputInfo{{8}, 700}, 0);
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().message().rfind("model.vocab_size: 500", 0), 0u) << too_small.status();
}

TEST(ModelTest, WrongInputShapesAreRejected) {
  auto cnn = CreateModel(Spec("mnist_cnn"), ModelInputInfo{{3, 32, 32}, 10}, 0);
  EXPECT_EQ(cnn.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cnn.status().message().find("mnist_cnn needs 1x28x28"), std::string::npos) << cnn.status();
  EXPECT_NE(cnn.status().message().find("{3, 32, 32}"), std::string::npos) << cnn.status();
  EXPECT_EQ(CreateModel(Spec("resnet_small"), ModelInputInfo{{784}, 10}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateModel(Spec("char_transformer"), ModelInputInfo{{1, 28, 28}, 10}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateModel(Spec("mlp"), ModelInputInfo{{}, 10}, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, CharTransformerIsCausal) {
  auto model = CreateModel(Spec("char_transformer"), ModelInputInfo{{8}, 20}, 0);
  ASSERT_TRUE(model.ok());
  (*model)->SetTraining(false);
  torch::Tensor a = torch::randint(20, {1, 8});
  torch::Tensor b = a.clone();
  b[0][5] = (a[0][5].item<int64_t>() + 1) % 20;  // change a later token
  torch::Tensor targets = torch::zeros({1, 8}, torch::kLong);
  torch::Tensor la = (*model)->Forward(Batch{a, targets}).logits;
  torch::Tensor lb = (*model)->Forward(Batch{b, targets}).logits;
  EXPECT_TRUE(torch::allclose(la.narrow(1, 0, 5), lb.narrow(1, 0, 5)));  // earlier positions unaffected
  EXPECT_FALSE(torch::allclose(la.narrow(1, 5, 3), lb.narrow(1, 5, 3)));
  // Shorter sequences than the context work; longer ones are an error.
  EXPECT_EQ((*model)->Forward(Batch{a.narrow(1, 0, 3), targets.narrow(1, 0, 3)}).logits.size(1), 3);
  EXPECT_THROW((*model)->Forward(Batch{torch::zeros({1, 9}, torch::kLong), torch::zeros({1, 9}, torch::kLong)}),
               c10::Error);
}

TEST(ModelTest, UnknownName) {
  auto model = CreateModel(Spec("gpt5"), ModelInputInfo{{4}, 2}, 0);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("model.name 'gpt5'"), std::string::npos) << model.status();
}

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::filesystem::path path =
      std::filesystem::path(root != nullptr ? root : std::filesystem::temp_directory_path().string()) / name;
  std::filesystem::create_directories(path);
  return path.string();
}

TEST(TorchScriptModelTest, MissingFile) {
  auto model = CreateModel(Spec("torchscript", "/nonexistent/model.pt"), ModelInputInfo{{4}, 2}, 0);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("model.path /nonexistent/model.pt: cannot load TorchScript: no such file"),
            std::string::npos)
      << model.status();
}

TEST(TorchScriptModelTest, GarbageFile) {
  const std::string path = TempDir("garbage") + "/model.pt";
  std::ofstream(path) << "this is not a TorchScript archive";
  auto model = CreateModel(Spec("torchscript", path), ModelInputInfo{{4}, 2}, 0);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("model.path " + path + ": cannot load TorchScript: "), std::string::npos)
      << model.status();
}

TEST(TorchScriptModelTest, MissingPath) {
  auto model = CreateModel(Spec("torchscript"), ModelInputInfo{{4}, 2}, 0);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("model.path"), std::string::npos);
}

constexpr char kScriptModels[] = R"(
import sys, torch
import torch.nn.functional as F
class Logits(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 3)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
class Loss(Logits):
    def forward(self, x, y):
        return F.cross_entropy(self.fc2(torch.relu(self.fc1(x))), y)
torch.manual_seed(0)
torch.jit.script(Logits()).save(sys.argv[1] + "/logits.pt")
torch.jit.script(Loss()).save(sys.argv[1] + "/loss.pt")
)";

// Scripts two tiny models with Python's torch (skips without it) and trains
// them through CreateModel.
TEST(TorchScriptModelTest, ScriptedModelsTrain) {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
  }
  const std::string dir = TempDir("scripted");
  std::ofstream(dir + "/make.py") << kScriptModels;
  ASSERT_EQ(std::system(("/usr/bin/python3 " + dir + "/make.py " + dir).c_str()), 0);

  torch::manual_seed(5);
  const Batch batch{torch::randn({8, 6}), torch::randint(3, {8})};
  for (const std::string& file : {std::string("logits.pt"), std::string("loss.pt")}) {
    SCOPED_TRACE(file);
    auto model = CreateModel(Spec("torchscript", dir + "/" + file), ModelInputInfo{{6}, 3}, 0);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->name(), "torchscript");
    auto named = (*model)->NamedParameters();
    ASSERT_EQ(named.size(), 4u);
    EXPECT_EQ(named[0].first, "fc1.weight");
    EXPECT_EQ((*model)->Parameters().size(), 4u);
    (*model)->SetTraining(true);

    ModelOutput out = (*model)->Forward(batch);
    if (file == "logits.pt") {
      EXPECT_EQ(out.logits.sizes().vec(), (std::vector<int64_t>{8, 3}));
    } else {
      EXPECT_FALSE(out.logits.defined());
    }
    double loss = out.loss.item<double>();
    const double first = loss;
    for (int step = 0; step < 20; ++step) {
      out.loss.backward();
      SgdStep(**model, 0.1);
      out = (*model)->Forward(batch);
      loss = out.loss.item<double>();
    }
    EXPECT_LT(loss, first * 0.8);
  }
  // The file, not the seed, sets a TorchScript model's parameters.
  auto a = CreateModel(Spec("torchscript", dir + "/logits.pt"), ModelInputInfo{{6}, 3}, 0);
  auto b = CreateModel(Spec("torchscript", dir + "/logits.pt"), ModelInputInfo{{6}, 3}, 9);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->Parameters()[0].equal((*b)->Parameters()[0])) << "the file, not the seed, sets parameters";
}

}  // namespace
}  // namespace herd
