// Who is missing when a collective failed without naming anyone.
//
// herd's TCP mesh and shared memory put the peer they blame on the failure
// (worker/comm/peer_fault.h), and the coordinator leaves it out of the next
// generation. Gloo and NCCL cannot name it: their timeouts and closed
// connections blame nobody, so a hung trainer whose daemon still heartbeats
// would be taken into the next generation and stall it again. Before such a
// failure is reported, each rank answers a roll call in the failed
// generation's KV on the coordinator ("rollcall/<rank>") and waits, up to
// one short shared deadline, for every other rank's answer; a rank that did
// not answer is blamed as late, as a TCP mesh timeout would blame it. When
// every rank answered, nobody is (the failure was something else).
//
// Waiting out that deadline cost every hang its full length (up to 2 s past
// the timeout), and every death on Gloo too. Where ranks post waiting marks
// (waiting_mark.h: CPU collectives), a rank whose mark is up counts as
// answered at once. A sole rank with neither an answer nor a mark is
// absent at once: after a timeout, every live rank stuck in the collective
// began waiting within the ranks' skew and posted its mark half a timeout
// earlier; after a closed connection, the rank that closed it is dead, or
// timed out (then it is marked, and its own report blames the same sole
// rank), or already reported (then the generation has ended). Several such
// ranks are waited for, a short look at each first, until one is left or
// the deadline passes: a live one among them (one that lagged behind a
// checkpoint's save, one that began its collective as it broke) answers
// once it finds the collective broken, and blaming the lowest at once
// could leave it out and keep the rank that hangs. A rank more than half a
// timeout behind its peers is blamed as a timeout blames a late peer.
// Below, "did not answer by the deadline" reads "neither answered nor
// waiting, once the others answered" where marks are posted.
//
// Which absent rank is blamed depends on how this rank failed:
//  - after a timeout, the lowest absent rank: this rank waited the whole
//    collective timeout, and every live peer is stuck in the same
//    collective, directly or through a peer, so each times out within the
//    skew of their entry into it (milliseconds, well inside the deadline)
//    and answers;
//  - after a closed connection that names nobody (Gloo closes a rank's
//    connections when it times out; a peer died), only a sole absent rank:
//    ranks still blocked behind this one have not failed yet and cannot
//    answer, so with several absent the picture is ambiguous and nobody is
//    blamed, as before the roll call.
// The connections stay open during the roll call, as for the report, so
// nobody fails early on a socket this rank closed.
//
// The hung rank itself never blames the ranks that waited for it: they
// answered when they failed, before it woke. When it wakes (SIGCONT) its
// collective times out at once (or finds its connections closed), and its
// roll call
//  - finds every answer while the generation is still current: it blames
//    nobody, and the others, still waiting, see its answer before their
//    deadline and blame nobody either (it answers again; the job re-forms
//    with it);
//  - or fails with FAILED_PRECONDITION once a peer's report has ended the
//    generation: it reports without blame, as before the roll call, and
//    joins again when the coordinator takes it back.
// A roll call that cannot reach the generation's KV (the coordinator is
// unreachable) ends early, and the failure is reported without blame.
//
// With islands (sync.islands_by), or where ranks post waiting marks, a
// rank also calls the roll after a failure that names a late peer. With
// islands the coordinator must tell a hung trainer from a link cut between
// sites (coordinator/readmit_backoff.h): a late peer that answers is alive;
// one that hangs cannot answer. In any job the late peer may be a healthy
// rank waiting on the hung one: waits are transitive, across communicators
// too (the hung rank sent its part of a vote to one peer and not to the
// other; the first moved on to the next collective and times out on the
// second, which still waits in the vote). With marks, following the blames
// costs a hang named directly nothing (below), so every such job follows
// them. Every rank of such a job whose generation failed answers first,
// before it waits for anyone: "blames <rank>" when it blames a peer late, else "here", so a
// peer behind a cut link, failing the same exchange at about the same
// time, is found alive. It then follows the blames (FollowBlames): the
// blamed peer's answer, then that of the peer it blames in turn, and so
// on, until
//  - a rank that did not answer by the shared deadline: it is blamed, as
//    silent (its trainer hangs, and it alone is left out);
//  - a rank that answered and blames nobody, or one already on the path (a
//    cut link: the two sides blame each other): it is blamed, as answered.
// Either way the report also names the rank on the path whose wait for it
// failed (BlamePath::blamed_by): behind a cut link the path may end at the
// reporter's own island-mate, and the link that failed, which decides which
// sites part, is that rank's and its blamer's, not the reporter's.
// Following the path matters because waits are transitive. Two sites of two
// ranks, {0, 1} and {2, 3}, rank 1 hung in a cross-site round: rank 3 waits
// for rank 1 from the round's start and times out first; rank 0 finishes
// its round with rank 2, then waits for rank 1's shard in the island's
// all-gather; rank 2 finishes its round with rank 0, then waits for rank 3
// there. Rank 2 thus blames its healthy island-mate 3 (and had rank 1 hung
// before the round, rank 2 would blame rank 0, stuck in the island's
// all-reduce, across islands). Every one of these waits ends at the hung
// rank: rank 3 answered "blames 1" before it waited, and so on, so every
// report names rank 1 as silent, whichever reaches the coordinator first.
// A rank behind others that enters its wait more than the roll call's
// deadline after them finds their answers already there and follows them,
// so it needs no deadline of its own for them. The path costs a hung rank
// nothing past the timeout where marks are posted (the hung rank is found
// neither answered nor waiting; the ranks on the path before it had
// answered or are waiting and answer within the skew), one roll call
// deadline (RollCallWait) where they are not; a cut link costs only the
// skew between the two sides' timeouts. A hung rank
// that wakes finds the generation ended, as above, and reports without
// blame; one that wakes within the deadline answers and counts as alive,
// as behind a cut link.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace herd {

// The roll call's shared deadline: long enough for the skew between the
// ranks' timeouts of one collective plus a KV round trip on a busy
// coordinator, short against the hang it resolves. A quarter of the
// collective timeout, at most 2 s, keeps a short timeout (5 s) worth it:
// the survivors train again soon after the timeout.
inline constexpr std::chrono::milliseconds kMaxRollCallWait{2000};
std::chrono::milliseconds RollCallWait(std::chrono::milliseconds collective_timeout);

// Whether a generation's `failure` calls a roll call: a timeout or a
// closed connection that blames no peer, among more than one rank.
bool NeedsRollCall(const absl::Status& failure, int world_size);

// The rank to blame after a roll call among `world_size` ranks, `answered`
// those that answered (`self` among them): for a timeout, the lowest absent
// rank; otherwise (a closed connection) the absent rank only when it is the
// sole one. nullopt when every rank answered.
std::optional<int> RankToBlame(int world_size, int self, const std::vector<int>& answered, bool timed_out);

// The KV key rank `rank` answers the roll call with.
std::string RollCallKey(int rank);

// A rank's answer: "blames <rank>" when it blames `blames` late, else "here".
std::string RollCallAnswer(std::optional<int> blames);
// The rank an answer blames among `world_size` ranks; nullopt for "here"
// or anything else (an answer is evidence of life, whatever it says).
std::optional<int> BlamedByAnswer(const std::string& answer, int world_size);

// One step along the blames from a late peer (islands, see above).
struct BlamePath {
  // The rank whose answer is needed next; nullopt once decided.
  std::optional<int> wait_for;
  // Once decided: the rank to blame, and whether it answered.
  int blamed = -1;
  bool answered = false;
  // Once decided: the rank on the path whose wait for `blamed` failed (self
  // when `blamed` is the peer it blamed). The failed link is theirs: behind
  // a cut link it may join two other ranks than self and `blamed`, e.g.
  // self's island-mate and a rank across, which decides which sides part.
  int blamed_by = -1;
};
// Where the blames from `self`, which blames `first` late, lead, given the
// answers seen (rank -> whom it blames) and the ranks found `silent` (no
// answer by the deadline).
BlamePath FollowBlames(int self, int first, const std::map<int, std::optional<int>>& answers,
                       const std::set<int>& silent);

// The rank whose wait for a failure's late peer failed, when a roll call
// followed the blames there (see BlamePath::blamed_by).
std::optional<int> LatePeerBlamedBy(const absl::Status& failure);

// Whether a failure's late peer answered the roll call, when one told.
std::optional<bool> LatePeerAnswered(const absl::Status& failure);

// Answers the roll call of a failed generation (of an islands job, or one
// whose ranks post waiting marks) for a failure that blames no peer late: "here", without waiting. Errors are
// logged, not returned: the report goes ahead.
void AnswerRollCall(RendezvousStore& store, int64_t generation, int rank);

// `failure` of `generation` (of an islands job, or one whose ranks post
// waiting marks), which blames a peer late, as it is reported: answers "blames <peer>", follows the blames within `wait`
// (FollowBlames) and blames the rank they lead to, saying whether it
// answered (LatePeerAnswered). `failure` unchanged when it blames no peer
// late or the roll call cannot be held (the generation already ended: a
// hung rank that woke; the coordinator is unreachable). Logs the outcome.
// With `marks`, a rank on the path neither answered nor waiting is silent
// at once, and only a rank found waiting is waited for.
absl::Status FollowLateBlame(const absl::Status& failure, RendezvousStore& store, int64_t generation, int rank,
                             int world_size, std::chrono::milliseconds wait, bool marks = false);

struct RollCallAnswers {
  // Not OK when the roll call could not be held (the generation is gone:
  // FAILED_PRECONDITION; the coordinator is unreachable).
  absl::Status status;
  // Ranks whose answer arrived or whose waiting mark is up, `rank` among them.
  std::vector<int> answered;
};

// Answers for `rank` in `store` (the failed generation's), then looks for
// the other ranks: without `marks`, each one's answer is waited for until
// `wait` from now. With `marks` (the ranks post waiting marks,
// waiting_mark.h) a rank whose mark is up counts at once; ranks with
// neither an answer nor a mark are waited for, a short look at each first,
// until one is left or `wait` has passed.
RollCallAnswers CallTheRoll(RendezvousStore& store, int rank, int world_size, std::chrono::milliseconds wait,
                            bool marks = false);

// `failure` of `generation` as it is reported: when it needs a roll call
// and RankToBlame names a rank that did not answer, the same failure
// blaming that rank as late (PeerLateError's payload, code
// DEADLINE_EXCEEDED) and as silent (LatePeerAnswered); otherwise `failure`
// unchanged. With `marks`, after a timeout a rank neither answered nor
// waiting is absent at once; otherwise the answers are waited for until
// `wait`.
// Logs the outcome.
absl::Status BlameByRollCall(const absl::Status& failure, RendezvousStore& store, int64_t generation, int rank,
                             int world_size, std::chrono::milliseconds wait, bool marks = false);

}  // namespace herd
