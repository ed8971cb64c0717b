// The member handshake: before a data-plane TCP connection carries anything,
// both ends prove they hold the generation's member key (a random 32-byte
// secret only the generation's members receive). Pure functions over bytes;
// the sockets are in tcp_mesh_listener.h.
//
// Three fixed-size frames, all integers big-endian:
//
//   1. challenge  listener -> connector  header, generation, listener rank, nonce_L
//   2. response   connector -> listener  header, generation, connector rank, nonce_C, mac_C
//   3. confirm    listener -> connector  header, generation, listener rank, mac_L
//
//   header = "HRDM" magic, version (1), frame type (1, 2, 3), two zero bytes
//   mac_X  = HMAC-SHA256(key, "herd-member-handshake-v1" || direction ||
//                        generation || listener rank || connector rank ||
//                        nonce_L || nonce_C)
//
// Why this shape:
//  - The listener speaks first and MACs nothing until the connector has
//    proved the key, so a stranger who connects learns only a random nonce
//    and cannot use the listener to compute MACs for it.
//  - Each side's nonce is fresh per connection, so a response recorded on
//    one connection fails on any other (replay).
//  - The direction byte differs for mac_C and mac_L, so one side's MAC sent
//    back to it proves nothing (reflection).
//  - Both ranks and the generation are MACed: a proof made for another pair
//    of ranks or another generation does not verify.
//  - Frames have one size each: anything shorter, longer, or with a wrong
//    magic, version, type or padding is rejected with a reason (for the
//    audit line) without looking further.
// What it does not do: it authenticates the start of a connection, not the
// bytes after it, and it does not encrypt. Someone on the network path can
// still read or alter the traffic (see docs/security.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace herd {

inline constexpr size_t kMemberKeyBytes = 32;
inline constexpr size_t kHandshakeNonceBytes = 32;
inline constexpr size_t kHandshakeMacBytes = 32;  // HMAC-SHA256
inline constexpr uint8_t kHandshakeVersion = 1;

inline constexpr size_t kHandshakeHeaderBytes = 8;  // magic, version, type, padding
inline constexpr size_t kChallengeBytes = kHandshakeHeaderBytes + 8 + 4 + kHandshakeNonceBytes;
inline constexpr size_t kResponseBytes = kHandshakeHeaderBytes + 8 + 4 + kHandshakeNonceBytes + kHandshakeMacBytes;
inline constexpr size_t kConfirmBytes = kHandshakeHeaderBytes + 8 + 4 + kHandshakeMacBytes;

enum class HandshakeFrame : uint8_t { kChallenge = 1, kResponse = 2, kConfirm = 3 };

size_t HandshakeFrameBytes(HandshakeFrame frame);

// Why a handshake was refused. Stable names (RejectReasonName) go into audit
// lines and metric labels.
enum class RejectReason {
  kNone,              // accepted
  kBadMagic,          // not a herd member frame at all (junk, another protocol)
  kBadVersion,        // a herd frame of a version this build does not speak
  kBadFrameType,      // a herd frame, but not the one expected at this point
  kBadPadding,        // reserved header bytes not zero
  kTruncated,         // the peer closed before a whole frame arrived
  kOversized,         // more bytes than the frame before our reply
  kWrongGeneration,   // a frame for another generation
  kBadRank,           // a rank outside the world, our own, or not the one dialled
  kBadMac,            // the proof does not verify: wrong key, replay, reflection
  kTimeout,           // no complete frame before the handshake deadline
  kDuplicateRank,     // that rank already has an authenticated connection
  kOverloaded,        // too many handshakes in progress; closed at once
  kIoError,           // a socket error (reset, ...)
};

const char* RejectReasonName(RejectReason reason);

struct HandshakeVerdict {
  RejectReason reason = RejectReason::kNone;
  std::string detail;  // what was wrong, for the audit line; empty when accepted
  bool ok() const { return reason == RejectReason::kNone; }
};

using MemberKey = std::array<uint8_t, kMemberKeyBytes>;
using HandshakeNonce = std::array<uint8_t, kHandshakeNonceBytes>;

// A fresh random key / nonce from OpenSSL's CSPRNG.
absl::StatusOr<MemberKey> NewMemberKey();
absl::StatusOr<HandshakeNonce> NewHandshakeNonce();

// A key from its wire form (exactly kMemberKeyBytes bytes); INVALID_ARGUMENT
// naming the length otherwise.
absl::StatusOr<MemberKey> MemberKeyFromBytes(std::string_view bytes);
std::string MemberKeyBytes(const MemberKey& key);

// What both ends must agree on: the key and generation, and the world size
// that bounds ranks.
struct HandshakeParams {
  MemberKey key{};
  int64_t generation = 0;
  int world_size = 0;
};

// Checks the bytes received so far of an `expected` frame: a wrong magic,
// version, type or padding is reported as soon as its bytes are in, so junk
// is refused on its first bytes instead of at the deadline. kNone means "no
// fault yet", not "complete".
HandshakeVerdict CheckFramePrefix(std::string_view received, HandshakeFrame expected);

// --- Listener side ---------------------------------------------------------

std::string EncodeChallenge(const HandshakeParams& params, int listener_rank, const HandshakeNonce& listener_nonce);

struct AcceptedResponse {
  int connector_rank = -1;
  std::string confirm;  // the frame to send back
};

// Verifies a connector's response to our challenge. On success `accepted`
// holds the connector's rank and the confirm frame proving our side.
HandshakeVerdict CheckResponse(const HandshakeParams& params, int listener_rank, const HandshakeNonce& listener_nonce,
                               std::string_view frame, AcceptedResponse* accepted);

// --- Connector side --------------------------------------------------------

struct AnsweredChallenge {
  HandshakeNonce listener_nonce{};
  std::string response;  // the frame to send
};

// Checks the listener's challenge (it must come from `expected_listener_rank`,
// the rank we dialled, in our generation) and builds our response with
// `connector_nonce`.
HandshakeVerdict AnswerChallenge(const HandshakeParams& params, int connector_rank, int expected_listener_rank,
                                 const HandshakeNonce& connector_nonce, std::string_view frame,
                                 AnsweredChallenge* answered);

// Verifies the listener's confirm: it proves the key over both nonces.
HandshakeVerdict CheckConfirm(const HandshakeParams& params, int connector_rank, int listener_rank,
                              const HandshakeNonce& listener_nonce, const HandshakeNonce& connector_nonce,
                              std::string_view frame);

}  // namespace herd
