// In-memory recovery: the state a trainer committed last, and how the ranks
// of a new generation agree on the newest commit and copy it to everyone.
//
// Every rank keeps its last commit as serialized bytes (the checkpoint
// format). A new generation all-gathers each rank's (generation, step) of
// that commit; the newest one wins (lowest rank on ties) and its holder
// broadcasts it. Commits form one history: a generation starts from the
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

struct CommittedState {
  int64_t generation = -1;  // the generation that committed it (or healed into it)
  int64_t step = -1;
  std::map<std::string, std::string> files;  // SerializeTrainingState output
};

// One byte string for a file map, and back. INVALID_ARGUMENT on bad framing.
std::string EncodeFiles(const std::map<std::string, std::string>& files);
absl::StatusOr<std::map<std::string, std::string>> DecodeFiles(const std::string& bytes);

// Collective: the rank holding the newest commit (highest generation, then
// step; lowest rank on ties), or -1 when no rank holds one. `mine` may be
// null (a joiner holds nothing).
absl::StatusOr<int> ChooseHealSource(Communicator* comm, const CommittedState* mine);

// Collective: `source` broadcasts its commit's files; every rank returns them.
absl::StatusOr<std::map<std::string, std::string>> BroadcastCommittedFiles(Communicator* comm, int source,
                                                                           const CommittedState* mine);

}  // namespace herd
