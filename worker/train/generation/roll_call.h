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
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
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

struct RollCallAnswers {
  // Not OK when the roll call could not be held (the generation is gone:
  // FAILED_PRECONDITION; the coordinator is unreachable).
  absl::Status status;
  std::vector<int> answered;  // ranks whose answer arrived, `rank` among them
};

// Answers for `rank` in `store` (the failed generation's), then waits until
// `wait` from now for the other ranks' answers.
RollCallAnswers CallTheRoll(RendezvousStore& store, int rank, int world_size, std::chrono::milliseconds wait);

// `failure` of `generation` as it is reported: when it needs a roll call
// and RankToBlame names a rank that did not answer within `wait`, the same
// failure blaming that rank as late (PeerLateError's payload, code
// DEADLINE_EXCEEDED); otherwise `failure` unchanged.
// Logs the outcome.
absl::Status BlameByRollCall(const absl::Status& failure, RendezvousStore& store, int64_t generation, int rank,
                             int world_size, std::chrono::milliseconds wait);

}  // namespace herd
