// Replacing a file atomically: readers see the old contents or the new ones,
// never a mix, and a crash leaves no partial file under the name. Every herd
// file that another process reads while it may change (ready files, metrics
// snapshots, final reports, models) is written this way.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace herd {

struct AtomicWriteOptions {
  // fsync the file and its folder: the new contents survive a power loss,
  // not only a process crash. Costs milliseconds; off for files rewritten
  // every second.
  bool durable = false;
};

// Writes `contents` to a temporary file beside `path` and renames it over
// `path`. Errors name the path and the cause; the temporary is removed.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 AtomicWriteOptions options = {});

}  // namespace herd
