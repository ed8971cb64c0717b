// Conversions between absl::Status (used inside herd) and grpc::Status (used
// on the wire). Services convert in exactly one place: the RPC edge.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace herd {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace herd
