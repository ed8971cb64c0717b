#include "worker/train/generation/roll_call.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/comm/peer_fault.h"

namespace herd {

std::chrono::milliseconds RollCallWait(std::chrono::milliseconds collective_timeout) {
  return std::min(kMaxRollCallWait, collective_timeout / 4);
}

bool NeedsRollCall(const absl::Status& failure, int world_size) {
  return world_size > 1 && failure.code() == absl::StatusCode::kDeadlineExceeded && !PeerFaultOf(failure).has_value();
}

std::optional<int> FirstAbsent(int world_size, int self, const std::vector<int>& answered) {
  for (int rank = 0; rank < world_size; ++rank) {
    if (rank == self) continue;
    if (std::find(answered.begin(), answered.end(), rank) == answered.end()) return rank;
  }
  return std::nullopt;
}

std::string RollCallKey(int rank) { return absl::StrCat("rollcall/", rank); }

RollCallAnswers CallTheRoll(RendezvousStore& store, int rank, int world_size, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  RollCallAnswers answers;
  answers.status = store.Set(RollCallKey(rank), "here");
  if (!answers.status.ok()) return answers;
  answers.answered.push_back(rank);
  for (int other = 0; other < world_size; ++other) {
    if (other == rank) continue;
    // Past the deadline a rank still counts if its answer is already there.
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(0));
    std::string value;
    absl::Status got = store.Get(RollCallKey(other), left, &value);
    if (got.ok()) {
      answers.answered.push_back(other);
    } else if (got.code() != absl::StatusCode::kDeadlineExceeded) {
      answers.status = got;
      return answers;
    }
  }
  return answers;
}

absl::Status BlameByRollCall(const absl::Status& failure, RendezvousStore& store, int64_t generation, int rank,
                             int world_size, std::chrono::milliseconds wait) {
  if (!NeedsRollCall(failure, world_size)) return failure;
  const RollCallAnswers answers = CallTheRoll(store, rank, world_size, wait);
  const std::string seconds = absl::StrFormat("%.2f", std::chrono::duration<double>(wait).count());
  if (!answers.status.ok()) {
    LOG(WARNING) << "roll call after the failure of generation " << generation << " could not be held ("
                 << answers.status << "): reporting it without blame";
    return failure;
  }
  const std::optional<int> absent = FirstAbsent(world_size, rank, answers.answered);
  if (!absent.has_value()) {
    LOG(INFO) << "roll call after the failure of generation " << generation << ": every rank answered within "
              << seconds << " s";
    return failure;
  }
  LOG(WARNING) << "roll call after the failure of generation " << generation << ": rank " << *absent
               << " did not answer within " << seconds << " s: blaming it";
  absl::Status blamed = PeerLateError(
      *absent, absl::StrCat("rank ", *absent, " did not answer the roll call within ", seconds, " s after: ",
                            failure.message()));
  failure.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { blamed.SetPayload(url, payload); });
  return blamed;
}

}  // namespace herd
