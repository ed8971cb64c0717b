#include "worker/train/generation/release_vote.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/comm/peer_fault.h"

namespace herd {

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
    return WithContext(s, "boundary vote: ");
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
    return WithContext(s, "boundary checkpoint vote: ");
  }
  return yes > 0.5f;
}

}  // namespace herd
