// A daemon process's incarnation: random per process, sent as gRPC metadata
// with every RegisterWorker call. The coordinator compares it across
// registrations to tell a restarted daemon (whose trainers exited with the
// old process) from the same process registering again.
#pragma once

#include <cstddef>

namespace herd {

// Metadata key of RegisterWorker calls; absent (older daemons): unknown,
// nothing is inferred.
inline constexpr char kIncarnationMetadataKey[] = "x-herd-incarnation";

// Longest value the coordinator accepts (letters and digits only).
inline constexpr size_t kMaxIncarnationBytes = 64;

}  // namespace herd
