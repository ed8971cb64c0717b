// Specs stored before the spec's closed sets became enums: each such field
// was a string under a number now reserved (proto/herd.proto). Parsing the
// stored bytes keeps that string as an unknown field; this converts it to
// the enum field of the same name, so a job submitted before the change
// resumes with the choices it was submitted with.
#pragma once

#include "absl/status/status.h"
#include "proto/herd.pb.h"

namespace herd {

// Moves every former string field left among `spec`'s unknown fields into
// its enum field (an enum field already set wins) and drops it. DATA_LOSS
// naming the field when the string is no YAML name of its enum.
absl::Status UpgradeStoredSpec(v1::JobSpec* spec);

}  // namespace herd
