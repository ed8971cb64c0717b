#include "worker/comm/peer_fault.h"

#include <cerrno>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace herd {
namespace {

constexpr absl::string_view kClosedUrl = "type.herd.dev/herd.PeerClosed";
constexpr absl::string_view kLateUrl = "type.herd.dev/herd.PeerLate";

absl::Status Blaming(absl::Status status, absl::string_view url, int rank) {
  status.SetPayload(url, absl::Cord(absl::StrCat(rank)));
  return status;
}

std::optional<int> RankIn(const absl::Status& status, absl::string_view url) {
  auto payload = status.GetPayload(url);
  int rank = -1;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &rank) || rank < 0) return std::nullopt;
  return rank;
}

}  // namespace

absl::Status PeerClosedError(int rank, absl::string_view message) {
  return Blaming(absl::UnavailableError(message.empty() ? absl::StrCat("rank ", rank, " closed its connection")
                                                        : std::string(message)),
                 kClosedUrl, rank);
}

absl::Status PeerSocketError(int rank, int error, absl::string_view message) {
  if (error == ECONNRESET || error == EPIPE || error == ECONNABORTED) return PeerClosedError(rank, message);
  return absl::UnavailableError(message);
}

absl::Status PeerLateError(int rank, absl::string_view message) {
  return Blaming(absl::DeadlineExceededError(message), kLateUrl, rank);
}

std::optional<PeerFault> PeerFaultOf(const absl::Status& status) {
  if (std::optional<int> rank = RankIn(status, kClosedUrl)) return PeerFault{PeerFaultKind::kClosed, *rank};
  if (std::optional<int> rank = RankIn(status, kLateUrl)) return PeerFault{PeerFaultKind::kLate, *rank};
  return std::nullopt;
}

absl::Status InGroupRanks(const absl::Status& status, const std::vector<int>& group_ranks) {
  const std::optional<PeerFault> fault = PeerFaultOf(status);
  if (!fault.has_value() || fault->rank >= static_cast<int>(group_ranks.size())) return status;
  absl::Status renumbered = status;
  renumbered.ErasePayload(kClosedUrl);
  renumbered.ErasePayload(kLateUrl);
  return Blaming(std::move(renumbered), fault->kind == PeerFaultKind::kClosed ? kClosedUrl : kLateUrl,
                 group_ranks[static_cast<size_t>(fault->rank)]);
}

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status wrapped(status.code(), absl::StrCat(context, status.message()));
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { wrapped.SetPayload(url, payload); });
  return wrapped;
}

}  // namespace herd
