// Which peer a failed collective blames, carried on the absl::Status as a
// payload so it survives the layers that add context to the message: the
// trainer puts it in its failure report as a field, and the coordinator
// leaves that member out of the next generation without parsing text.
#pragma once

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace herd {

enum class PeerFaultKind {
  kClosed,  // its connection closed: its process ended
  kLate,    // it did not answer within the collective timeout: it may hang
};

struct PeerFault {
  PeerFaultKind kind;
  int rank;
};

// UNAVAILABLE "rank N closed its connection", or `message` when set.
absl::Status PeerClosedError(int rank, absl::string_view message = "");
// UNAVAILABLE with `message` for a send or receive on `rank`'s connection
// that failed with `error` (an errno): a reset or broken pipe means its
// process closed it, and blames it as closed; any other error blames no one.
absl::Status PeerSocketError(int rank, int error, absl::string_view message);
// DEADLINE_EXCEEDED with `message`, naming `rank` as the late peer.
absl::Status PeerLateError(int rank, absl::string_view message);

// The peer `status` blames, if any.
std::optional<PeerFault> PeerFaultOf(const absl::Status& status);

// `status` from a subgroup's collective, its blamed peer renumbered from
// its rank in the subgroup to `group_ranks[rank]`, its rank in the whole
// group, so the report names the right member; unchanged when it blames
// nobody or a rank outside `group_ranks`.
absl::Status InGroupRanks(const absl::Status& status, const std::vector<int>& group_ranks);

// `status` with `context` before its message, code and payloads kept.
absl::Status WithContext(const absl::Status& status, absl::string_view context);

}  // namespace herd
