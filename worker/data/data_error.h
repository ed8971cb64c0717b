// Thrown by Dataset::Get when the data itself is wrong (a token id at or
// above the vocabulary): every retry would read the same bytes, so the
// trainer fails the job at once (worker/train/step/torch_errors.h) instead of
// spending the restart budget.
#pragma once

#include <stdexcept>

namespace herd {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace herd
