#include "tests/harness/lookup_model.h"

#include <torch/script.h>
#include <torch/torch.h>

namespace herd::testing {

std::string WriteTokenLookupModel(const std::string& dir, int64_t vocab) {
  torch::jit::Module module("TokenLookup");
  module.register_parameter("table", torch::zeros({vocab, vocab}).set_requires_grad(true), /*is_buffer=*/false);
  module.define(R"JIT(
def forward(self, x, y):
    logits = torch.embedding(self.table, x)
    return -torch.log_softmax(logits, -1).gather(-1, y.unsqueeze(-1)).mean()
)JIT");
  const std::string path = dir + "/token-lookup.pt";
  module.save(path);
  return path;
}

}  // namespace herd::testing
