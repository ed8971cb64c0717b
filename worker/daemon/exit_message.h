// The message a daemon reports with a trainer's exit.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace herd::worker {

constexpr size_t kMaxExitMessageBytes = 4096;

// The trainer's termination message file if it has any content, else the
// last non-empty line of its log; at most kMaxExitMessageBytes, valid UTF-8
// (protobuf rejects string fields that are not), surrounding whitespace
// trimmed. Empty when neither file says anything.
std::string ReadExitMessage(const std::string& termination_message_path, const std::string& log_path);

// At most `max_bytes` of `text`, cut on a character boundary, with bytes
// that are not valid UTF-8 replaced by '?'.
std::string SanitizeUtf8(absl::string_view text, size_t max_bytes);

}  // namespace herd::worker
