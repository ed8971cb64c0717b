#include "client/log_lines.h"

namespace herd::client {

void LogLines::Add(absl::string_view bytes) {
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    if (newline == absl::string_view::npos) {
      partial_.append(bytes.data(), bytes.size());
      return;
    }
    if (partial_.empty()) {
      emit_(bytes.substr(0, newline));
    } else {
      partial_.append(bytes.data(), newline);
      emit_(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(newline + 1);
  }
}

void LogLines::Finish() {
  if (partial_.empty()) return;
  emit_(partial_);
  partial_.clear();
}

}  // namespace herd::client
