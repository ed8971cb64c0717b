// A TorchScript model for token data whose compute is a table lookup, so a
// test can stream many tokens through the trainer per second: the cost of a
// step is the data, not the model. No LibTorch in this header.
#pragma once

#include <cstdint>
#include <string>

namespace herd::testing {

// Writes, under `dir`, a model whose forward(x, y) returns the mean
// next-token cross-entropy of logits table[x] (a `vocab` x `vocab`
// parameter) against y. Returns the path.
std::string WriteTokenLookupModel(const std::string& dir, int64_t vocab);

}  // namespace herd::testing
