#include "worker/train/release_vote.h"

#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace herd {
namespace {

// Status payloads that tell a boundary from a failure (all are ABORTED, so
// code that knows none of them treats them as the end of the generation).
constexpr char kBoundaryPayload[] = "herd.dev/release";
constexpr char kSelf[] = "self";
constexpr char kAll[] = "all";
constexpr char kPeer[] = "peer";
constexpr char kReform[] = "reform";

bool HasPayload(const absl::Status& status, const char* value) {
  auto payload = status.GetPayload(kBoundaryPayload);
  return payload.has_value() && *payload == value;
}

absl::Status WithPayload(absl::Status status, const char* value) {
  status.SetPayload(kBoundaryPayload, absl::Cord(value));
  return status;
}

}  // namespace

absl::StatusOr<BoundaryVote> TakeBoundaryVote(Communicator* comm, const std::vector<int64_t>& heard_leaving,
                                              bool reform) {
  const int world = comm->size();
  // One count per rank (how many ranks heard it leaves), then re-forms.
  std::vector<float> counts(world + 1, 0.0f);
  for (int64_t rank : heard_leaving) {
    if (rank >= 0 && rank < world) counts[rank] = 1.0f;
  }
  counts[world] = reform ? 1.0f : 0.0f;
  if (absl::Status s = comm->AllReduce(counts.data(), counts.size(), DataType::kFloat32); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("boundary vote: ", s.message()));
  }
  BoundaryVote vote;
  for (int rank = 0; rank < world; ++rank) {
    if (counts[rank] > 0.5f) vote.leavers.push_back(rank);
  }
  vote.reformers = static_cast<int>(std::lround(counts[world]));
  return vote;
}

absl::StatusOr<bool> AgreeOnCheckpoint(Communicator* comm, int64_t rank, bool recorded) {
  float yes = rank == 0 && recorded ? 1.0f : 0.0f;
  if (absl::Status s = comm->AllReduce(&yes, 1, DataType::kFloat32); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("boundary checkpoint vote: ", s.message()));
  }
  return yes > 0.5f;
}

absl::Status ReleasedStatus(int64_t step) {
  return WithPayload(absl::AbortedError(absl::StrCat("released: left the job after committing step ", step)), kSelf);
}

absl::Status ReleasedAllStatus(int64_t step) {
  return WithPayload(absl::AbortedError(absl::StrCat("released: every rank left the job after committing step ", step,
                                                     ", which rank 0 checkpointed")),
                     kAll);
}

absl::Status PeerReleasedStatus(int leavers, int64_t step) {
  return WithPayload(
      absl::AbortedError(absl::StrCat(leavers, leavers == 1 ? " rank" : " ranks", " left the job after step ", step,
                                      " was committed")),
      kPeer);
}

absl::Status ReformAtBoundaryStatus(int64_t step) {
  return WithPayload(
      absl::AbortedError(absl::StrCat("the job re-forms after step ", step, " was committed, so workers can join")),
      kReform);
}

bool IsReleased(const absl::Status& status) { return HasPayload(status, kSelf) || HasPayload(status, kAll); }
bool IsReleasedAll(const absl::Status& status) { return HasPayload(status, kAll); }
bool IsPeerReleased(const absl::Status& status) { return HasPayload(status, kPeer); }
bool IsReformAtBoundary(const absl::Status& status) { return HasPayload(status, kReform); }

}  // namespace herd
