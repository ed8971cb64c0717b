// In-memory recovery: the state a trainer committed last, and how the ranks
// of a new generation agree on the newest commit and copy it to everyone.
//
// Every rank keeps its last commit in memory (state_snapshot.h). A new
// generation all-gathers each rank's (generation, step) of that commit; the
// newest one wins (lowest rank on ties) and its holder broadcasts it in the
// checkpoint format. Commits form one history: a generation starts from the
// newest commit among its members, so a commit made in a later generation is
// always the one to continue from, and within a generation a later step is.
// Picking the newest also makes a commit all-or-nothing: if any rank finished
// commit s, every rank had reached step s, and all continue from it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"

namespace herd {

// One byte string for a file map, and back. INVALID_ARGUMENT on bad framing.
std::string EncodeFiles(const std::map<std::string, std::string>& files);
absl::StatusOr<std::map<std::string, std::string>> DecodeFiles(const std::string& bytes);

// Collective: the rank holding the newest commit (highest generation, then
// step; lowest rank on ties), or -1 when no rank holds one. A rank holding
// none (a joiner) passes generation -1.
absl::StatusOr<int> ChooseHealSource(Communicator* comm, int64_t generation, int64_t step);

// Collective: `source` broadcasts `*files`; the other ranks receive them into it.
absl::Status BroadcastFiles(Communicator* comm, int source, std::map<std::string, std::string>* files);

}  // namespace herd
