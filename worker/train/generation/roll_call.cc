#include "worker/train/generation/roll_call.h"

#include <glog/logging.h>

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/comm/peer_fault.h"
#include "worker/train/generation/waiting_mark.h"

namespace herd {
namespace {

constexpr absl::string_view kRollCallUrl = "type.herd.dev/herd.LatePeerRollCall";
constexpr absl::string_view kAnswered = "answered";
constexpr absl::string_view kSilent = "silent";
constexpr absl::string_view kBlames = "blames ";
constexpr absl::string_view kBlamedByUrl = "type.herd.dev/herd.LatePeerBlamedBy";

// `failure` (its message replaced by `message`) blaming `rank` as late, and
// saying whether `rank` answered the roll call, and (when not -1) the rank
// whose wait for it failed.
absl::Status BlamingLate(const absl::Status& failure, int rank, bool answered, absl::string_view message,
                         int blamed_by = -1) {
  absl::Status blamed(absl::StatusCode::kDeadlineExceeded, message);
  failure.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { blamed.SetPayload(url, payload); });
  PeerLateError(rank, message).ForEachPayload(
      [&](absl::string_view url, const absl::Cord& payload) { blamed.SetPayload(url, payload); });
  blamed.SetPayload(kRollCallUrl, absl::Cord(answered ? kAnswered : kSilent));
  if (blamed_by >= 0) blamed.SetPayload(kBlamedByUrl, absl::Cord(absl::StrCat(blamed_by)));
  return blamed;
}

std::chrono::milliseconds Left(std::chrono::steady_clock::time_point deadline) {
  // Past the deadline a rank still counts if its answer is already there.
  return std::max(std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()),
                  std::chrono::milliseconds(0));
}

// Where a rank stands at a roll call.
enum class RollCallPresence {
  kAnswered,  // its answer is there
  kWaiting,   // no answer yet, but its waiting mark is up: it is alive
  kSilent,    // neither
};

// Rank `other`'s presence: without `marks`, its answer waited for until
// `deadline`. With them, found at once from its answer or its mark.
absl::StatusOr<RollCallPresence> Seek(RendezvousStore& store, int other, std::chrono::steady_clock::time_point deadline,
                                      bool marks, std::string* answer) {
  if (!marks) {
    absl::Status got = store.Get(RollCallKey(other), Left(deadline), answer);
    if (got.ok()) return RollCallPresence::kAnswered;
    if (got.code() == absl::StatusCode::kDeadlineExceeded) return RollCallPresence::kSilent;
    return got;
  }
  absl::Status got = store.Get(RollCallKey(other), std::chrono::milliseconds(0), answer);
  if (got.ok()) return RollCallPresence::kAnswered;
  if (got.code() != absl::StatusCode::kDeadlineExceeded) return got;
  std::string mark;
  got = store.Get(WaitingMarkKey(other), std::chrono::milliseconds(0), &mark);
  if (got.ok() && mark == kWaitingMark) return RollCallPresence::kWaiting;
  if (!got.ok() && got.code() != absl::StatusCode::kDeadlineExceeded) return got;
  return RollCallPresence::kSilent;
}

// How long the first look at each of several ranks neither answered nor
// waiting waits for its answer: a live one answers as soon as it finds the
// collective broken, so those due now are not waited out behind a rank
// that never answers.
constexpr std::chrono::milliseconds kFirstLook{50};

}  // namespace

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

std::string RollCallAnswer(std::optional<int> blames) {
  return blames.has_value() ? absl::StrCat(kBlames, *blames) : "here";
}

std::optional<int> BlamedByAnswer(const std::string& answer, int world_size) {
  int rank = -1;
  if (!absl::StartsWith(answer, kBlames) || !absl::SimpleAtoi(answer.substr(kBlames.size()), &rank)) {
    return std::nullopt;
  }
  if (rank < 0 || rank >= world_size) return std::nullopt;
  return rank;
}

BlamePath FollowBlames(int self, int first, const std::map<int, std::optional<int>>& answers,
                       const std::set<int>& silent) {
  std::set<int> on_path = {self};
  int by = self;
  int at = first;
  while (true) {
    if (silent.count(at)) return BlamePath{std::nullopt, at, false, by};
    auto answer = answers.find(at);
    if (answer == answers.end()) return BlamePath{at, -1, false, -1};
    on_path.insert(at);
    const std::optional<int>& next = answer->second;
    if (!next.has_value() || on_path.count(*next)) return BlamePath{std::nullopt, at, true, by};
    by = at;
    at = *next;
  }
}

std::optional<int> LatePeerBlamedBy(const absl::Status& failure) {
  const auto payload = failure.GetPayload(kBlamedByUrl);
  int rank = -1;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &rank) || rank < 0) return std::nullopt;
  return rank;
}

std::optional<bool> LatePeerAnswered(const absl::Status& failure) {
  const auto payload = failure.GetPayload(kRollCallUrl);
  if (!payload.has_value()) return std::nullopt;
  if (*payload == kAnswered) return true;
  if (*payload == kSilent) return false;
  return std::nullopt;
}

void AnswerRollCall(RendezvousStore& store, int64_t generation, int rank) {
  absl::Status answered = store.Set(RollCallKey(rank), RollCallAnswer(std::nullopt));
  if (!answered.ok() && answered.code() != absl::StatusCode::kFailedPrecondition) {
    LOG(WARNING) << "could not answer the roll call of generation " << generation << ": " << answered;
  }
}

absl::Status FollowLateBlame(const absl::Status& failure, RendezvousStore& store, int64_t generation, int rank,
                             int world_size, std::chrono::milliseconds wait, bool marks) {
  const std::optional<PeerFault> fault = PeerFaultOf(failure);
  if (!fault.has_value() || fault->kind != PeerFaultKind::kLate || fault->rank == rank || fault->rank < 0 ||
      fault->rank >= world_size) {
    return failure;
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  const std::string context = absl::StrCat("roll call after the failure of generation ", generation, ": ");
  absl::Status status = store.Set(RollCallKey(rank), RollCallAnswer(fault->rank));
  std::map<int, std::optional<int>> answers;
  std::set<int> silent;
  std::set<int> waiting;  // found waiting on their peers (marks)
  BlamePath path;
  while (status.ok()) {
    path = FollowBlames(rank, fault->rank, answers, silent);
    if (!path.wait_for.has_value()) break;
    std::string value;
    // A rank found waiting is alive: whom it blames comes with its answer,
    // when its own wait fails (within the skew of this one's).
    absl::StatusOr<RollCallPresence> found =
        Seek(store, *path.wait_for, deadline, marks, &value);
    if (found.ok() && *found == RollCallPresence::kWaiting) {
      waiting.insert(*path.wait_for);
      found = Seek(store, *path.wait_for, deadline, /*marks=*/false, &value);
    }
    if (!found.ok()) {
      status = found.status();
    } else if (*found == RollCallPresence::kAnswered) {
      answers[*path.wait_for] = BlamedByAnswer(value, world_size);
    } else {
      silent.insert(*path.wait_for);
    }
  }
  if (status.code() == absl::StatusCode::kFailedPrecondition) {
    LOG(INFO) << context << "the generation already ended (a peer reported first): reporting rank " << fault->rank
              << " late as it is";
    return failure;
  }
  if (!status.ok()) {
    LOG(WARNING) << context << "could not be held (" << status << "): reporting rank " << fault->rank
                 << " late as it is";
    return failure;
  }
  const std::string seconds = absl::StrFormat("%.2f", std::chrono::duration<double>(wait).count());
  const std::string via =
      path.blamed == fault->rank ? "" : absl::StrCat(" (following the blames from rank ", fault->rank, ")");
  std::string message;
  if (path.answered) {
    LOG(WARNING) << context << "late rank " << path.blamed << via << " answered: it is alive, the link to it failed";
    message = absl::StrCat("rank ", path.blamed, via, " answered the roll call: the link to it failed: ",
                           failure.message());
  } else {
    const std::string why = marks && !waiting.count(path.blamed) ? " and was not waiting on its peers"
                                                                  : absl::StrCat(" within ", seconds, " s");
    LOG(WARNING) << context << "late rank " << path.blamed << via << " did not answer" << why << ": it hangs";
    message = absl::StrCat("rank ", path.blamed, via, " did not answer the roll call", why, " after: ", failure.message());
  }
  return BlamingLate(failure, path.blamed, path.answered, message, path.blamed_by);
}

RollCallAnswers CallTheRoll(RendezvousStore& store, int rank, int world_size, std::chrono::milliseconds wait,
                            bool marks) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  RollCallAnswers answers;
  answers.status = store.Set(RollCallKey(rank), RollCallAnswer(std::nullopt));
  if (!answers.status.ok()) return answers;
  answers.answered.push_back(rank);
  std::vector<int> silent;
  for (int other = 0; other < world_size; ++other) {
    if (other == rank) continue;
    std::string value;
    absl::StatusOr<RollCallPresence> found = Seek(store, other, deadline, marks, &value);
    if (!found.ok()) {
      answers.status = found.status();
      return answers;
    }
    if (*found != RollCallPresence::kSilent) {
      answers.answered.push_back(other);
    } else {
      silent.push_back(other);
    }
  }
  if (!marks) return answers;
  // Several ranks neither answered nor waiting (with marks): a live one
  // among them (one that lagged, a checkpoint's save; one that began its
  // collective as it broke) answers once it finds the collective broken.
  // They are waited for, a short look at each first, until one is left:
  // that one hangs or died.
  for (const bool first_look : {true, false}) {
    for (auto it = silent.begin(); it != silent.end() && silent.size() > 1;) {
      std::string value;
      const auto until =
          first_look ? std::min(deadline, std::chrono::steady_clock::now() + kFirstLook) : deadline;
      absl::StatusOr<RollCallPresence> found = Seek(store, *it, until, /*marks=*/false, &value);
      if (!found.ok()) {
        answers.status = found.status();
        return answers;
      }
      if (*found == RollCallPresence::kAnswered) {
        answers.answered.push_back(*it);
        it = silent.erase(it);
      } else {
        ++it;
      }
    }
  }
  return answers;
}

absl::Status BlameByRollCall(const absl::Status& failure, RendezvousStore& store, int64_t generation, int rank,
                             int world_size, std::chrono::milliseconds wait, bool marks) {
  if (!NeedsRollCall(failure, world_size)) return failure;
  const bool timed_out = failure.code() == absl::StatusCode::kDeadlineExceeded;
  const RollCallAnswers answers = CallTheRoll(store, rank, world_size, wait, marks);
  const std::string seconds = absl::StrFormat("%.2f", std::chrono::duration<double>(wait).count());
  const std::string within = absl::StrCat(" within ", seconds, " s");
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
  const std::optional<int> absent = RankToBlame(world_size, rank, answers.answered, timed_out);
  if (!absent.has_value()) {
    const int missing = world_size - static_cast<int>(answers.answered.size());
    if (missing == 0) {
      LOG(INFO) << "roll call after the failure of generation " << generation << ": every rank answered"
                << (marks ? " or was waiting on its peers" : within);
    } else {
      LOG(WARNING) << "roll call after the failure of generation " << generation << ": " << missing
                   << " ranks did not answer" << within
                   << " after a closed connection (some may wait behind this one): blaming none";
    }
    return failure;
  }
  const std::string why = !marks ? within : " and was not waiting on its peers";
  LOG(WARNING) << "roll call after the failure of generation " << generation << ": rank " << *absent
               << " did not answer" << why << ": blaming it";
  return BlamingLate(failure, *absent, /*answered=*/false,
                     absl::StrCat("rank ", *absent, " did not answer the roll call", why, " after: ", failure.message()));
}

}  // namespace herd
