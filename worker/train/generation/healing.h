// In-memory recovery: the state a trainer committed last, and how the ranks
// of a new generation agree on the newest commit and copy it to everyone.
//
// Every rank keeps its last commit in memory (state_snapshot.h). A new
// generation all-gathers each rank's (generation, step) of that commit; the
// newest one wins (lowest rank on ties) and its holder broadcasts it in the
// checkpoint format to the ranks that do not hold it (none is sent when all
// do). Commits form one history: a generation starts from the
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

// The newest commit among a generation's ranks and who holds it.
struct HealSource {
  int rank = -1;  // -1: no rank holds a commit
  int64_t generation = -1;
  int64_t step = -1;
  bool held_by_all = false;  // every rank holds this very commit: nothing to send
};

// Collective: the rank holding the newest commit (highest generation, then
// step; lowest rank on ties). A rank holding none (a joiner) passes
// generation -1. Every rank whose own commit is that same (generation, step)
// holds the same parameters and outer state; only its inner optimizer state
// may differ (sync mode average keeps it local), so it restores its own.
absl::StatusOr<HealSource> ChooseHealSource(Communicator* comm, int64_t generation, int64_t step);

// Collective: `source` broadcasts `*files`; the other ranks receive them into
// it. The transfer is checked end to end: the source sends the SHA-256 of
// the bytes first, and a receiver whose bytes do not match fails with
// UNAVAILABLE (a failed transfer: the generation re-forms and heals again).
absl::Status BroadcastFiles(Communicator* comm, int source, std::map<std::string, std::string>* files);

// The heal transfer's check: OK when `bytes` hash to `sha256_hex`, else
// UNAVAILABLE naming the source rank and both digests.
absl::Status CheckHealBytes(const std::string& bytes, const std::string& sha256_hex, int source);

}  // namespace herd
