// Splits a log's byte stream, which arrives in chunks that may cut a line
// (or a UTF-8 character) anywhere, into whole lines for `herd logs`.
#pragma once

#include <functional>
#include <string>

#include "absl/strings/string_view.h"

namespace herd::client {

class LogLines {
 public:
  // `emit` gets each line without its newline.
  explicit LogLines(std::function<void(absl::string_view line)> emit) : emit_(std::move(emit)) {}
  void Add(absl::string_view bytes);
  // The last line when the log does not end with a newline.
  void Finish();

 private:
  std::function<void(absl::string_view)> emit_;
  std::string partial_;
};

}  // namespace herd::client
