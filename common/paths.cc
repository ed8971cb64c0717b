#include "common/paths.h"

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace herd {

absl::StatusOr<std::string> ResolveUnderRoot(const std::string& root, const std::string& relative) {
  namespace fs = std::filesystem;
  if (relative.empty()) return absl::InvalidArgumentError("path is empty");
  fs::path rel(relative);
  if (rel.is_absolute()) {
    return absl::InvalidArgumentError(absl::StrCat("path must be relative to the root: ", relative));
  }
  std::error_code ec;
  fs::path base = fs::weakly_canonical(fs::path(root), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad root ", root, ": ", ec.message()));
  // weakly_canonical resolves symlinks in the existing prefix and "..".
  fs::path full = fs::weakly_canonical(base / rel, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("bad path ", relative, ": ", ec.message()));
  auto mismatch = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (mismatch.first != base.end()) {
    return absl::InvalidArgumentError(absl::StrCat("path escapes its root ", root, ": ", relative));
  }
  return full.string();
}

}  // namespace herd
