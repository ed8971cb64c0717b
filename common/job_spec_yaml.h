// Reads a YAML job file into a JobSpec. Keys are the proto field names; an
// unknown key or a value of the wrong type is an error naming its path.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd {

// `model: mnist_cnn` is shorthand for `model: {name: mnist_cnn}`.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(const std::string& yaml_text);
absl::StatusOr<v1::JobSpec> ReadJobSpecFile(const std::string& path);

}  // namespace herd
