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

}  // namespace herd::testing
