// The job-spec fuzz target: YAML text in, through the parser, defaults and
// validation. Shared by the seeded mutation test that CI runs
// (job_spec_fuzz_test) and the libFuzzer build (scripts/fuzz_job_spec.sh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace herd {

// Every rejection must name where the problem is: "PATH: what", PATH being
// "job spec" (the whole document) or a dotted path of JobSpec fields whose
// every component but an unknown last one (an "unknown field" error)
// exists. OK when `status` is OK or so named; else INTERNAL saying why.
absl::Status CheckNamesAField(const absl::Status& status);

// Parses, defaults and validates `text`. OK when it is accepted or rejected
// with a field-naming error (`*accepted` says which); INTERNAL when a
// rejection names no field. Crashes and sanitizer reports are the fuzzer's
// other findings.
absl::Status FuzzJobSpecOnce(const std::string& text, bool* accepted = nullptr);

}  // namespace herd
