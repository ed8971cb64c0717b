// Keeps user-supplied paths inside a configured root.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace herd {

// Joins `relative` onto `root` and returns the normalized result, or
// INVALID_ARGUMENT when `relative` is absolute or climbs out of `root` (".."
// components, or symlinks that resolve outside it).
absl::StatusOr<std::string> ResolveUnderRoot(const std::string& root, const std::string& relative);

}  // namespace herd
