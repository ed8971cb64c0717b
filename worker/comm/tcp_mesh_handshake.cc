#include "worker/comm/tcp_mesh_handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace herd {
namespace {

constexpr char kMagic[4] = {'H', 'R', 'D', 'M'};
constexpr std::string_view kMacLabel = "herd-member-handshake-v1";
// Which side a MAC proves: the connector's and the listener's differ, so a
// MAC sent back to its author proves nothing.
constexpr uint8_t kConnectorProves = 'C';
constexpr uint8_t kListenerProves = 'L';

using Mac = std::array<uint8_t, kHandshakeMacBytes>;

void PutU64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xff));
}
void PutU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xff));
}
uint64_t GetU64(std::string_view in, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(in[at + i]);
  return v;
}
uint32_t GetU32(std::string_view in, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in[at + i]);
  return v;
}
template <size_t N>
void PutBytes(std::string* out, const std::array<uint8_t, N>& bytes) {
  out->append(reinterpret_cast<const char*>(bytes.data()), N);
}
template <size_t N>
std::array<uint8_t, N> GetBytes(std::string_view in, size_t at) {
  std::array<uint8_t, N> bytes;
  std::memcpy(bytes.data(), in.data() + at, N);
  return bytes;
}

std::string Header(HandshakeFrame frame) {
  std::string out(kMagic, sizeof(kMagic));
  out.push_back(static_cast<char>(kHandshakeVersion));
  out.push_back(static_cast<char>(frame));
  out.append(2, '\0');
  return out;
}

const char* FrameName(HandshakeFrame frame) {
  switch (frame) {
    case HandshakeFrame::kChallenge: return "challenge";
    case HandshakeFrame::kResponse: return "response";
    case HandshakeFrame::kConfirm: return "confirm";
  }
  return "?";
}

Mac ComputeMac(const HandshakeParams& params, uint8_t direction, int listener_rank, int connector_rank,
               const HandshakeNonce& listener_nonce, const HandshakeNonce& connector_nonce) {
  std::string message(kMacLabel);
  message.push_back(static_cast<char>(direction));
  PutU64(&message, static_cast<uint64_t>(params.generation));
  PutU32(&message, static_cast<uint32_t>(listener_rank));
  PutU32(&message, static_cast<uint32_t>(connector_rank));
  PutBytes(&message, listener_nonce);
  PutBytes(&message, connector_nonce);
  Mac mac{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), params.key.data(), static_cast<int>(params.key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(), &length);
  return mac;
}

// Constant time: how many leading bytes match must not leak through timing.
bool MacEquals(const Mac& expected, std::string_view received, size_t at) {
  return CRYPTO_memcmp(expected.data(), received.data() + at, expected.size()) == 0;
}

HandshakeVerdict Reject(RejectReason reason, std::string detail) { return {reason, std::move(detail)}; }

// Shape checks every frame shares: prefix, exact size, generation. `rank`
// receives the frame's rank field.
HandshakeVerdict CheckFrame(const HandshakeParams& params, std::string_view frame, HandshakeFrame expected,
                            int64_t* rank) {
  if (HandshakeVerdict verdict = CheckFramePrefix(frame, expected); !verdict.ok()) return verdict;
  const size_t want = HandshakeFrameBytes(expected);
  if (frame.size() < want) {
    return Reject(RejectReason::kTruncated,
                  absl::StrCat(FrameName(expected), " frame of ", frame.size(), " bytes, expected ", want));
  }
  if (frame.size() > want) {
    return Reject(RejectReason::kOversized,
                  absl::StrCat(FrameName(expected), " frame of ", frame.size(), " bytes, expected ", want));
  }
  const auto generation = static_cast<int64_t>(GetU64(frame, kHandshakeHeaderBytes));
  if (generation != params.generation) {
    return Reject(RejectReason::kWrongGeneration,
                  absl::StrCat("generation ", generation, ", expected ", params.generation));
  }
  *rank = static_cast<int32_t>(GetU32(frame, kHandshakeHeaderBytes + 8));
  return {};
}

constexpr size_t kRankAt = kHandshakeHeaderBytes + 8;
constexpr size_t kAfterRank = kRankAt + 4;

}  // namespace

size_t HandshakeFrameBytes(HandshakeFrame frame) {
  switch (frame) {
    case HandshakeFrame::kChallenge: return kChallengeBytes;
    case HandshakeFrame::kResponse: return kResponseBytes;
    case HandshakeFrame::kConfirm: return kConfirmBytes;
  }
  return 0;
}

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kNone: return "none";
    case RejectReason::kBadMagic: return "bad_magic";
    case RejectReason::kBadVersion: return "bad_version";
    case RejectReason::kBadFrameType: return "bad_frame_type";
    case RejectReason::kBadPadding: return "bad_padding";
    case RejectReason::kTruncated: return "truncated";
    case RejectReason::kOversized: return "oversized";
    case RejectReason::kWrongGeneration: return "wrong_generation";
    case RejectReason::kBadRank: return "bad_rank";
    case RejectReason::kBadMac: return "bad_mac";
    case RejectReason::kTimeout: return "timeout";
    case RejectReason::kDuplicateRank: return "duplicate_rank";
    case RejectReason::kOverloaded: return "overloaded";
    case RejectReason::kIoError: return "io_error";
  }
  return "unknown";
}

absl::StatusOr<MemberKey> NewMemberKey() {
  MemberKey key;
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    return absl::InternalError("RAND_bytes failed to make a member key");
  }
  return key;
}

absl::StatusOr<HandshakeNonce> NewHandshakeNonce() {
  HandshakeNonce nonce;
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    return absl::InternalError("RAND_bytes failed to make a handshake nonce");
  }
  return nonce;
}

absl::StatusOr<MemberKey> MemberKeyFromBytes(std::string_view bytes) {
  if (bytes.size() != kMemberKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("member key: ", bytes.size(), " bytes, expected ", kMemberKeyBytes));
  }
  return GetBytes<kMemberKeyBytes>(bytes, 0);
}

std::string MemberKeyBytes(const MemberKey& key) {
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

HandshakeVerdict CheckFramePrefix(std::string_view received, HandshakeFrame expected) {
  const size_t magic = std::min(received.size(), sizeof(kMagic));
  if (magic > 0 && std::memcmp(received.data(), kMagic, magic) != 0) {
    return Reject(RejectReason::kBadMagic, "not a herd member handshake");
  }
  auto byte_at = [&](size_t i) { return static_cast<int>(static_cast<uint8_t>(received[i])); };
  if (received.size() > 4 && byte_at(4) != kHandshakeVersion) {
    return Reject(RejectReason::kBadVersion, absl::StrCat("handshake version ", byte_at(4), ", this build speaks ",
                                                          static_cast<int>(kHandshakeVersion)));
  }
  if (received.size() > 5 && byte_at(5) != static_cast<int>(expected)) {
    return Reject(RejectReason::kBadFrameType,
                  absl::StrCat("frame type ", byte_at(5), ", expected ", FrameName(expected)));
  }
  for (size_t i = 6; i < std::min(received.size(), kHandshakeHeaderBytes); ++i) {
    if (received[i] != '\0') return Reject(RejectReason::kBadPadding, "reserved header bytes are not zero");
  }
  return {};
}

std::string EncodeChallenge(const HandshakeParams& params, int listener_rank, const HandshakeNonce& listener_nonce) {
  std::string out = Header(HandshakeFrame::kChallenge);
  PutU64(&out, static_cast<uint64_t>(params.generation));
  PutU32(&out, static_cast<uint32_t>(listener_rank));
  PutBytes(&out, listener_nonce);
  return out;
}

HandshakeVerdict CheckResponse(const HandshakeParams& params, int listener_rank, const HandshakeNonce& listener_nonce,
                               std::string_view frame, AcceptedResponse* accepted) {
  int64_t connector_rank = -1;
  if (HandshakeVerdict verdict = CheckFrame(params, frame, HandshakeFrame::kResponse, &connector_rank);
      !verdict.ok()) {
    return verdict;
  }
  if (connector_rank < 0 || connector_rank >= params.world_size || connector_rank == listener_rank) {
    return Reject(RejectReason::kBadRank, absl::StrCat("connector claims rank ", connector_rank, " (world of ",
                                                       params.world_size, ", listener is rank ", listener_rank, ")"));
  }
  const auto connector_nonce = GetBytes<kHandshakeNonceBytes>(frame, kAfterRank);
  const Mac expected = ComputeMac(params, kConnectorProves, listener_rank, static_cast<int>(connector_rank),
                                  listener_nonce, connector_nonce);
  if (!MacEquals(expected, frame, kAfterRank + kHandshakeNonceBytes)) {
    return Reject(RejectReason::kBadMac, absl::StrCat("response claiming rank ", connector_rank,
                                                      " does not prove the generation's member key"));
  }
  accepted->connector_rank = static_cast<int>(connector_rank);
  accepted->confirm = Header(HandshakeFrame::kConfirm);
  PutU64(&accepted->confirm, static_cast<uint64_t>(params.generation));
  PutU32(&accepted->confirm, static_cast<uint32_t>(listener_rank));
  PutBytes(&accepted->confirm, ComputeMac(params, kListenerProves, listener_rank, static_cast<int>(connector_rank),
                                          listener_nonce, connector_nonce));
  return {};
}

HandshakeVerdict AnswerChallenge(const HandshakeParams& params, int connector_rank, int expected_listener_rank,
                                 const HandshakeNonce& connector_nonce, std::string_view frame,
                                 AnsweredChallenge* answered) {
  int64_t listener_rank = -1;
  if (HandshakeVerdict verdict = CheckFrame(params, frame, HandshakeFrame::kChallenge, &listener_rank);
      !verdict.ok()) {
    return verdict;
  }
  if (listener_rank != expected_listener_rank) {
    return Reject(RejectReason::kBadRank,
                  absl::StrCat("listener says rank ", listener_rank, ", dialled rank ", expected_listener_rank));
  }
  answered->listener_nonce = GetBytes<kHandshakeNonceBytes>(frame, kAfterRank);
  answered->response = Header(HandshakeFrame::kResponse);
  PutU64(&answered->response, static_cast<uint64_t>(params.generation));
  PutU32(&answered->response, static_cast<uint32_t>(connector_rank));
  PutBytes(&answered->response, connector_nonce);
  PutBytes(&answered->response, ComputeMac(params, kConnectorProves, expected_listener_rank, connector_rank,
                                           answered->listener_nonce, connector_nonce));
  return {};
}

HandshakeVerdict CheckConfirm(const HandshakeParams& params, int connector_rank, int listener_rank,
                              const HandshakeNonce& listener_nonce, const HandshakeNonce& connector_nonce,
                              std::string_view frame) {
  int64_t rank = -1;
  if (HandshakeVerdict verdict = CheckFrame(params, frame, HandshakeFrame::kConfirm, &rank); !verdict.ok()) {
    return verdict;
  }
  if (rank != listener_rank) {
    return Reject(RejectReason::kBadRank, absl::StrCat("confirm from rank ", rank, ", dialled rank ", listener_rank));
  }
  const Mac expected =
      ComputeMac(params, kListenerProves, listener_rank, connector_rank, listener_nonce, connector_nonce);
  if (!MacEquals(expected, frame, kAfterRank)) {
    return Reject(RejectReason::kBadMac, "confirm does not prove the generation's member key");
  }
  return {};
}

}  // namespace herd
