// Thrown when the job's model cannot be trained as it is: its output does
// not fit the dataset, its forward raises, or its loss does not require
// grad. Every retry would throw it again, so the trainer fails the job at
// once (INVALID_ARGUMENT, worker/train/step/torch_errors.h) instead of spending
// the restart budget.
#pragma once

#include <stdexcept>

namespace herd {

class ModelContractError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace herd
