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
  const bool collective_failure = failure.code() == absl::StatusCode::kDeadlineExceeded ||
                                  failure.code() == absl::StatusCode::kUnavailable;
  return world_size > 1 && collective_failure && !PeerFaultOf(failure).has_value();
}

std::optional<int> RankToBlame(int world_size, int self, const std::vector<int>& answered, bool timed_out) {
  std::vector<int> absent;
  for (int rank = 0; rank < world_size; ++rank) {
    if (rank == self) continue;
    if (std::find(answered.begin(), answered.end(), rank) == answered.end()) absent.push_back(rank);
  }
  if (absent.empty() || (!timed_out && absent.size() > 1)) return std::nullopt;
  return absent.front();
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
    const auto left = std::max(
        std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
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
  if (answers.status.code() == absl::StatusCode::kFailedPrecondition) {
    LOG(INFO) << "roll call after the failure of generation " << generation
              << ": the generation already ended (a peer reported first): reporting without blame";
    return failure;
  }
  if (!answers.status.ok()) {
    LOG(WARNING) << "roll call after the failure of generation " << generation << " could not be held ("
                 << answers.status << "): reporting it without blame";
    return failure;
  }
  const bool timed_out = failure.code() == absl::StatusCode::kDeadlineExceeded;
  const std::optional<int> absent = RankToBlame(world_size, rank, answers.answered, timed_out);
  if (!absent.has_value()) {
    const int missing = world_size - static_cast<int>(answers.answered.size());
    if (missing == 0) {
      LOG(INFO) << "roll call after the failure of generation " << generation << ": every rank answered within "
                << seconds << " s";
    } else {
      LOG(WARNING) << "roll call after the failure of generation " << generation << ": " << missing
                   << " ranks did not answer within " << seconds
                   << " s after a closed connection (some may wait behind this one): blaming none";
    }
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
