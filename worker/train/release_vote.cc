#include "worker/train/release_vote.h"

#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace herd {
namespace {

// Status payloads that tell a release from a failure (both are ABORTED, so
// code that knows neither treats them as the end of the generation).
constexpr char kReleasePayload[] = "herd.dev/release";
constexpr char kSelf[] = "self";
constexpr char kPeer[] = "peer";

bool HasPayload(const absl::Status& status, const char* value) {
  auto payload = status.GetPayload(kReleasePayload);
  return payload.has_value() && *payload == value;
}

}  // namespace

absl::StatusOr<int> CountLeavingRanks(Communicator* comm, bool leaving) {
  float count = leaving ? 1.0f : 0.0f;
  if (absl::Status s = comm->AllReduce(&count, 1, DataType::kFloat32); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("release vote: ", s.message()));
  }
  return static_cast<int>(std::lround(count));
}

absl::Status ReleasedStatus(int64_t step) {
  absl::Status status = absl::AbortedError(absl::StrCat("released: left the job after committing step ", step));
  status.SetPayload(kReleasePayload, absl::Cord(kSelf));
  return status;
}

absl::Status PeerReleasedStatus(int leavers, int64_t step) {
  absl::Status status = absl::AbortedError(
      absl::StrCat(leavers, leavers == 1 ? " rank" : " ranks", " left the job after step ", step, " was committed"));
  status.SetPayload(kReleasePayload, absl::Cord(kPeer));
  return status;
}

bool IsReleased(const absl::Status& status) { return HasPayload(status, kSelf); }
bool IsPeerReleased(const absl::Status& status) { return HasPayload(status, kPeer); }

}  // namespace herd
