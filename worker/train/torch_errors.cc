#include "worker/train/torch_errors.h"

#include <c10/util/Exception.h>

#include <new>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/data/data_error.h"

namespace herd {

bool IsOutOfMemory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  // LibTorch 1.13's CPU allocator throws a plain c10::Error.
  const char* text = e.what();
  return absl::StrContains(text, "can't allocate memory") || absl::StrContains(text, "not enough memory") ||
         absl::StrContains(text, "CUDA out of memory");
}

namespace {

// c10::Error's what() carries a C++ backtrace after the message, which is
// one line for an allocation failure.
std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// The exception's message; for a c10::Error without the backtrace it
// appends to what().
std::string MessageOf(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  return e.what();
}

}  // namespace

absl::Status TrainingError(const std::exception& e, const TrainingErrorContext& where) {
  if (dynamic_cast<const ModelContractError*>(&e) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where.what, " (model ", where.model, "): ", e.what()));
  }
  if (dynamic_cast<const DataError*>(&e) != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where.what, ": ", e.what()));
  }
  if (!IsOutOfMemory(e)) return absl::InternalError(absl::StrCat(where.what, ": ", MessageOf(e)));
  const std::string message = FirstLine(e.what());
  return absl::ResourceExhaustedError(absl::StrFormat(
      "out of memory at %s (model %s, %.1f MB of parameters, batch_size %d per rank, device %s): %s; a retry "
      "would run out again: reduce batch_size or the model, or use a device with more memory",
      where.what, where.model, static_cast<double>(where.parameter_bytes) / 1e6, where.batch_size, where.device,
      message));
}

}  // namespace herd
