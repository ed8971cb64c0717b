// What an exception thrown by LibTorch inside training means for the job.
// Running out of memory (GPU or host) is a property of the job's shape, so
// another generation would run out again: it becomes RESOURCE_EXHAUSTED,
// which fails the job at once (trainer exit TRAINER_EXIT_JOB_ERROR) with the
// step, the model and the memory figures, instead of spending the restart
// budget on identical retries. A model that breaks the training contract
// (ModelContractError) is INVALID_ARGUMENT, for the same reason, and so is
// data found wrong while gathering a batch (DataError). Anything
// else is INTERNAL (a member failure). Messages never carry LibTorch's C++
// backtrace.
#pragma once

#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "worker/models/model_error.h"

namespace herd {

// Where training stood when the exception was thrown.
struct TrainingErrorContext {
  std::string what;         // e.g. "training step 12", "building the job"
  std::string model;        // the spec's model name
  std::string device;       // e.g. "cuda:0", "cpu"
  int64_t batch_size = 0;   // per rank
  int64_t parameter_bytes = 0;
};

// True when `e` reports a failed allocation: c10::OutOfMemoryError (CUDA's
// caching allocator), LibTorch's CPU allocator ("can't allocate memory") or
// std::bad_alloc.
bool IsOutOfMemory(const std::exception& e);

// Called in a catch block around the model's forward: an exception from it
// is the model's own (a forward that raises, outputs that do not fit the
// data), so it is rethrown as ModelContractError, which fails the job at
// once. Rethrown unchanged where it may come from outside the model: out of
// memory, a device fault, or any exception of a forward that is a collective
// (a peer may have failed).
[[noreturn]] void RethrowForwardError(const std::exception& e, bool forward_is_collective);

absl::Status TrainingError(const std::exception& e, const TrainingErrorContext& where);

}  // namespace herd
