// SHA-256 as lower-case hex: checkpoint manifests, the token digests of
// auth files (what `sha256sum` prints), and downloads checked as they arrive.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace herd {

std::string Sha256Hex(const std::string& data);

// The same digest over data that arrives in pieces (a streamed download),
// so nothing has to be held whole.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;

  void Update(absl::string_view data);
  // The hex digest of everything given; call once.
  std::string FinishHex();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace herd
