#include "worker/train/step/torch_errors.h"

#include <c10/util/Exception.h>

#include <new>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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

// A TorchScript error's what() is the interpreter's traceback; the error
// itself (e.g. "RuntimeError: bad input") is its last line.
std::string ErrorLine(const std::string& text) {
  if (!absl::StrContains(text, "Traceback of TorchScript")) return FirstLine(text);
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  return lines.empty() ? text : std::string(absl::StripAsciiWhitespace(lines.back()));
}

// Faults of the device or its driver can pass, and another generation may not see them.
bool IsDeviceFault(const std::string& message) {
  return absl::StrContains(message, "CUDA error") || absl::StrContains(message, "CUDA driver") ||
         absl::StrContains(message, "NCCL");
}

}  // namespace

void RethrowForwardError(const std::exception& e, bool forward_is_collective) {
  const std::string message = MessageOf(e);
  if (forward_is_collective || IsOutOfMemory(e) || IsDeviceFault(message) ||
      dynamic_cast<const ModelContractError*>(&e) != nullptr || dynamic_cast<const DataError*>(&e) != nullptr) {
    throw;
  }
  throw ModelContractError(absl::StrCat("forward raised: ", ErrorLine(message)));
}

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
