// When a member left out because a peer could not reach it (blamed late: a
// hung trainer, or a link cut between sites that both still reach the
// coordinator) may come back, and who is left out. Pure functions of the
// state, like the rest of cluster_state.
//
// Its trainer answers at once when only the link is cut, so taking it back
// as soon as it answers re-forms the job into the same failure again and
// again. Instead it stays out for a back-off after it was left out: one
// lease, doubled each time it is blamed late again in the very generation
// it came back in, at most kMaxReadmitStrikes doublings (16 leases, under
// the trainer's join timeout with the default lease); once a generation
// with it commits a step, it starts from one lease again.
//
// With islands, a late peer in another island is either a cut link between
// the sites or a hung trainer; the report says which, by whether the
// blamed peer answered the failed generation's roll call
// (ReportFailureRequest.peer_roll_call; who answers and whom a rank blames
// are in worker/train/generation/roll_call.h):
//  - it did not answer: its trainer hangs, and it goes alone, as within an
//    island (sending a healthy island out would keep the hung rank in the
//    next generation, which would stall again);
//  - it answered (or the report predates the roll call): a cut link.
//    Leaving out only that rank keeps its island's other ranks, whose
//    cross-site links are cut as well, so the next generation fails too. A
//    whole island goes instead: the one that came back in this generation
//    (a retry failing again), else the smaller one, else the one whose
//    first rank is higher (the side of generation rank 0 goes on). The side
//    that goes on is thus the same whoever reports first, and it is the
//    side that kept training, which holds the newest commit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/cluster_state.h"

namespace herd::coordinator {

inline constexpr int kMaxReadmitStrikes = 4;

// How long a member with `strikes` stays out after it was left out.
double ReadmitBackoffSeconds(int strikes, double lease_seconds);

// Its strikes once blamed late in `generation`: one more than `record`'s
// (at most kMaxReadmitStrikes) when it came back in that very generation,
// else 0 (no record: first blame; or blamed again later in a generation
// that has not committed since it came back: not its return that failed).
int StrikesAfterBlame(const ReadmitRecord* record, int64_t generation);

// Whether `worker_id` came back after a back-off in `generation`.
bool ReadmittedIn(const JobRecord& job, const std::string& worker_id, int64_t generation);

struct LateBlameOutcome {
  // Members of the current generation to leave out, in rank order.
  std::vector<std::string> left_out;
  // With islands and a blame across them: the island that goes on, which
  // could not reach them. "" otherwise.
  std::string unreachable_from;
};

// Who a report blaming `blamed` late, which says `roll_call` of it, leaves
// out of `job`'s current generation: `blamed` alone without islands,
// within an island or when it did not answer the roll call; a whole island
// across islands otherwise (see above). `blamer`: the member whose wait for
// `blamed` failed, the reporter or the rank it followed the blames from
// (ReportFailureRequest.peer_blamed_by): theirs is the link that failed.
LateBlameOutcome LeftOutForLateBlame(const ClusterState& state, const JobRecord& job, const std::string& blamer,
                                     const std::string& blamed, v1::PeerRollCall roll_call);

}  // namespace herd::coordinator
