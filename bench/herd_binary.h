// Finds a herd binary built by Bazel from a benchmark or its smoke test.
#pragma once

#include <string>

namespace herd::bench {

// Path of `package_path` ("coordinator/herd-coordinator") among the runfiles
// of this program (bazel run, bazel test, or bazel-bin/...runfiles), else
// under bazel-bin/ of the current directory.
std::string FindHerdBinary(const std::string& package_path, const char* argv0);

}  // namespace herd::bench
