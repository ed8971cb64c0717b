#include "tests/harness/scripted_models.h"

#include <torch/script.h>
#include <torch/torch.h>

namespace herd::testing {

std::string WriteBadThirdBatchModel(const std::string& dir, bool trainable) {
  torch::jit::Module module("BadThirdBatch");
  torch::manual_seed(5);
  module.register_parameter("w", (torch::randn({16, 4}) * 0.1).set_requires_grad(trainable), /*is_buffer=*/false);
  module.register_attribute("calls", c10::IntType::get(), int64_t{0});
  module.define(R"JIT(
def forward(self, x, y):
    self.calls += 1
    logits = torch.matmul(x.flatten(1), self.w)
    loss = -torch.log_softmax(logits, 1).gather(1, y.unsqueeze(1)).mean()
    if self.calls == 3:
        loss = loss * float("inf")
    return loss
)JIT");
  const std::string path = dir + (trainable ? "/bad-third-batch.pt" : "/frozen.pt");
  module.save(path);
  return path;
}

std::string WriteThreeClassModel(const std::string& dir) {
  torch::jit::Module module("ThreeClasses");
  torch::manual_seed(6);
  module.register_parameter("w", (torch::randn({16, 3}) * 0.1).set_requires_grad(true), /*is_buffer=*/false);
  module.define(R"JIT(
def forward(self, x):
    return torch.matmul(x.flatten(1), self.w)
)JIT");
  const std::string path = dir + "/three-classes.pt";
  module.save(path);
  return path;
}

std::string WriteRaisingModel(const std::string& dir, const std::string& message) {
  torch::jit::Module module("Raising");
  module.register_parameter("w", torch::zeros({16, 4}), /*is_buffer=*/false);
  module.define(R"JIT(
def forward(self, x):
    assert bool(x.numel() < 0), ")JIT" + message + R"JIT("
    return torch.matmul(x.flatten(1), self.w)
)JIT");
  const std::string path = dir + "/raising.pt";
  module.save(path);
  return path;
}

}  // namespace herd::testing
