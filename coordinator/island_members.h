// Who of a job's candidates forms its next generation when its ranks are
// grouped into islands (sync.islands_by) that each need at least
// sync.min_workers_per_island ranks. A pure function of the candidates,
// their labels and the spec (docs/scheduling.md, "Islands").
//
// An island with fewer candidates than its minimum sits out: the generation
// forms from the islands that have enough, so one site losing workers never
// stops the others, and the island rejoins once it has enough again.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "coordinator/cluster_state.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// The island of `worker_id` under label `key`: its label's value, "" when
// it has no such label or is unknown.
std::string IslandOfWorker(const ClusterState& state, const std::string& key, const std::string& worker_id);

// The members of the next generation, in the order given: `survivors` (the
// current members, who hold the committed state) first, then `joiners`
// (idle workers, in the order they are preferred). Without islands, or
// with a minimum of 1, every survivor and joiners up to `limit` members in
// all, as before islands had a minimum. With one:
// - an island whose survivors and joiners together number fewer than
//   min_workers_per_island sits out (its survivors are not chosen);
// - every other survivor is chosen, even beyond `limit` (survivors are
//   never cut by it);
// - islands short of their minimum in survivors get joiners to reach it,
//   in the order their first candidate appears, while `limit` leaves room;
//   one that cannot reach it within `limit` sits out, survivors included;
// - joiners fill what `limit` leaves, in order, into the islands chosen.
// A worker missing from `state.workers` or without the label is in island
// "" like any other value.
std::vector<std::string> ChooseMembers(const ClusterState& state, const v1::JobSpec& spec,
                                       const std::vector<std::string>& survivors,
                                       const std::vector<std::string>& joiners, int64_t limit);

// The islands of `candidates` none of which ChooseMembers chose (they sit
// out), each with how many of its workers were available, by label value.
// Empty without islands.
std::map<std::string, int64_t> IslandsSittingOut(const ClusterState& state, const v1::JobSpec& spec,
                                                 const std::vector<std::string>& candidates,
                                                 const std::vector<std::string>& chosen);

}  // namespace herd::coordinator
