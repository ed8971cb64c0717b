// Specs written before the spec's closed sets became enums: each such field
// was a string under a number now reserved (proto/herd.proto). Parsing those
// bytes keeps the string as an unknown field; this converts it to the enum
// field of the same name, so a job stored before the change resumes with the
// choices it was submitted with, and an older client's submission means
// what it meant.
#pragma once

#include "absl/status/status.h"
#include "proto/herd.pb.h"

namespace herd {

// Moves every former string field left among `spec`'s unknown fields into
// its enum field (an enum field already set wins) and drops it.
// INVALID_ARGUMENT naming the field and the choices when the string is no
// YAML name of its enum.
absl::Status UpgradeStoredSpec(v1::JobSpec* spec);

}  // namespace herd
