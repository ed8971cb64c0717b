#include "worker/comm/tcp_mesh_handshake.h"

#include <gtest/gtest.h>

#include <string>

namespace herd {
namespace {

HandshakeNonce Nonce(uint8_t fill) {
  HandshakeNonce nonce;
  nonce.fill(fill);
  return nonce;
}

HandshakeParams Params(uint8_t key_fill = 7, int64_t generation = 12, int world = 4) {
  HandshakeParams params;
  params.key.fill(key_fill);
  params.generation = generation;
  params.world_size = world;
  return params;
}

// The full exchange between listener rank 0 and connector rank 2, with
// separate parameters per side so tests can make them disagree.
struct Transcript {
  std::string challenge, response, confirm;
  HandshakeVerdict answer, check, confirm_check;
  int connector_rank_seen = -1;
};

Transcript Exchange(const HandshakeParams& listener, const HandshakeParams& connector, const HandshakeNonce& nonce_l,
               const HandshakeNonce& nonce_c) {
  Transcript t;
  t.challenge = EncodeChallenge(listener, 0, nonce_l);
  AnsweredChallenge answered;
  t.answer = AnswerChallenge(connector, 2, 0, nonce_c, t.challenge, &answered);
  if (!t.answer.ok()) return t;
  t.response = answered.response;
  AcceptedResponse accepted;
  t.check = CheckResponse(listener, 0, nonce_l, t.response, &accepted);
  if (!t.check.ok()) return t;
  t.connector_rank_seen = accepted.connector_rank;
  t.confirm = accepted.confirm;
  t.confirm_check = CheckConfirm(connector, 2, 0, answered.listener_nonce, nonce_c, t.confirm);
  return t;
}

TEST(TcpMeshHandshake, FramesHaveTheirFixedSizes) {
  const Transcript t = Exchange(Params(), Params(), Nonce(1), Nonce(2));
  EXPECT_EQ(t.challenge.size(), kChallengeBytes);
  EXPECT_EQ(t.response.size(), kResponseBytes);
  EXPECT_EQ(t.confirm.size(), kConfirmBytes);
  EXPECT_EQ(t.challenge.substr(0, 4), "HRDM");
}

TEST(TcpMeshHandshake, SameKeyAuthenticatesBothSides) {
  const Transcript t = Exchange(Params(), Params(), Nonce(1), Nonce(2));
  ASSERT_TRUE(t.answer.ok()) << t.answer.detail;
  ASSERT_TRUE(t.check.ok()) << t.check.detail;
  EXPECT_EQ(t.connector_rank_seen, 2);
  EXPECT_TRUE(t.confirm_check.ok()) << t.confirm_check.detail;
}

TEST(TcpMeshHandshake, RandomKeysAndNoncesAreFreshAndWork) {
  auto key1 = NewMemberKey(), key2 = NewMemberKey();
  ASSERT_TRUE(key1.ok() && key2.ok());
  EXPECT_NE(*key1, *key2);
  auto n1 = NewHandshakeNonce(), n2 = NewHandshakeNonce();
  ASSERT_TRUE(n1.ok() && n2.ok());
  EXPECT_NE(*n1, *n2);
  HandshakeParams params = Params();
  params.key = *key1;
  EXPECT_TRUE(Exchange(params, params, *n1, *n2).confirm_check.ok());
}

TEST(TcpMeshHandshake, KeyWireFormRoundTripsAndRejectsWrongLength) {
  const MemberKey key = Params().key;
  auto back = MemberKeyFromBytes(MemberKeyBytes(key));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, key);
  auto short_key = MemberKeyFromBytes("abc");
  ASSERT_FALSE(short_key.ok());
  EXPECT_EQ(short_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_key.status().message().find("3 bytes, expected 32"), std::string::npos);
}

TEST(TcpMeshHandshake, ConnectorWithWrongKeyIsRefused) {
  const Transcript t = Exchange(Params(7), Params(8), Nonce(1), Nonce(2));
  ASSERT_TRUE(t.answer.ok());
  EXPECT_EQ(t.check.reason, RejectReason::kBadMac);
  EXPECT_TRUE(t.confirm.empty());  // the listener proves nothing to it
}

TEST(TcpMeshHandshake, ListenerWithWrongKeyIsRefusedByConnector) {
  // A listener that accepted (say it skipped the check) still cannot prove
  // the key: its confirm is MACed with another key.
  const HandshakeParams real = Params(7), impostor = Params(8);
  const std::string challenge = EncodeChallenge(impostor, 0, Nonce(1));
  AnsweredChallenge answered;
  ASSERT_TRUE(AnswerChallenge(real, 2, 0, Nonce(2), challenge, &answered).ok());
  // The impostor builds a confirm as a listener holding its own key would.
  const Transcript fake = Exchange(impostor, impostor, Nonce(1), Nonce(2));
  ASSERT_TRUE(fake.confirm_check.ok());
  EXPECT_EQ(CheckConfirm(real, 2, 0, answered.listener_nonce, Nonce(2), fake.confirm).reason, RejectReason::kBadMac);
}

TEST(TcpMeshHandshake, ReplayedResponseFailsOnNewChallenge) {
  const HandshakeParams params = Params();
  const Transcript recorded = Exchange(params, params, Nonce(1), Nonce(2));
  ASSERT_TRUE(recorded.check.ok());
  // A new connection gets a fresh listener nonce; the recorded response is
  // bound to the old one.
  AcceptedResponse accepted;
  EXPECT_EQ(CheckResponse(params, 0, Nonce(3), recorded.response, &accepted).reason, RejectReason::kBadMac);
}

TEST(TcpMeshHandshake, ReplayedConfirmFailsForNewConnectorNonce) {
  const HandshakeParams params = Params();
  const Transcript recorded = Exchange(params, params, Nonce(1), Nonce(2));
  ASSERT_TRUE(recorded.confirm_check.ok());
  // An impostor listener replays the old challenge and confirm; the
  // connector's fresh nonce makes the old confirm useless.
  AnsweredChallenge answered;
  ASSERT_TRUE(AnswerChallenge(params, 2, 0, Nonce(9), recorded.challenge, &answered).ok());
  EXPECT_EQ(CheckConfirm(params, 2, 0, answered.listener_nonce, Nonce(9), recorded.confirm).reason,
            RejectReason::kBadMac);
}

TEST(TcpMeshHandshake, ReflectedProofFails) {
  const HandshakeParams params = Params();
  const Transcript t = Exchange(params, params, Nonce(1), Nonce(2));
  ASSERT_TRUE(t.confirm_check.ok());
  // The listener's MAC (confirm) sent back as the connector's proof, with
  // the frame rewritten into a response for the same ranks and nonces.
  std::string reflected = t.response.substr(0, kResponseBytes - kHandshakeMacBytes);
  reflected += t.confirm.substr(kConfirmBytes - kHandshakeMacBytes);
  AcceptedResponse accepted;
  EXPECT_EQ(CheckResponse(params, 0, Nonce(1), reflected, &accepted).reason, RejectReason::kBadMac);
  // And the connector's MAC as the listener's confirm.
  std::string mirrored = t.confirm.substr(0, kConfirmBytes - kHandshakeMacBytes);
  mirrored += t.response.substr(kResponseBytes - kHandshakeMacBytes);
  EXPECT_EQ(CheckConfirm(params, 2, 0, Nonce(1), Nonce(2), mirrored).reason, RejectReason::kBadMac);
}

TEST(TcpMeshHandshake, ProofForAnotherRankFails) {
  const HandshakeParams params = Params();
  const Transcript t = Exchange(params, params, Nonce(1), Nonce(2));
  ASSERT_TRUE(t.check.ok());
  std::string claimed = t.response;
  claimed[kHandshakeHeaderBytes + 8 + 3] = 3;  // claims rank 3 with rank 2's proof
  AcceptedResponse accepted;
  EXPECT_EQ(CheckResponse(params, 0, Nonce(1), claimed, &accepted).reason, RejectReason::kBadMac);
}

TEST(TcpMeshHandshake, RanksOutsideTheWorldOrOwnAreRefused) {
  const HandshakeParams params = Params();
  for (int bad : {0, 4, -1}) {
    // A connector claiming the listener's own rank, past the world, negative.
    AnsweredChallenge answered;
    ASSERT_TRUE(AnswerChallenge(params, bad, 0, Nonce(2), EncodeChallenge(params, 0, Nonce(1)), &answered).ok());
    AcceptedResponse accepted;
    HandshakeVerdict verdict = CheckResponse(params, 0, Nonce(1), answered.response, &accepted);
    EXPECT_EQ(verdict.reason, RejectReason::kBadRank) << bad;
    EXPECT_NE(verdict.detail.find("claims rank " + std::to_string(bad)), std::string::npos) << verdict.detail;
  }
  // The connector refuses a listener that is not the rank it dialled.
  AnsweredChallenge answered;
  EXPECT_EQ(AnswerChallenge(params, 2, 1, Nonce(2), EncodeChallenge(params, 0, Nonce(1)), &answered).reason,
            RejectReason::kBadRank);
}

TEST(TcpMeshHandshake, WrongGenerationIsRefusedByEitherSide) {
  const Transcript stale_connector = Exchange(Params(7, 12), Params(7, 11), Nonce(1), Nonce(2));
  EXPECT_EQ(stale_connector.answer.reason, RejectReason::kWrongGeneration);
  EXPECT_EQ(stale_connector.answer.detail, "generation 12, expected 11");
  // A response for another generation, even with the right key, fails on
  // the listener before its MAC is looked at.
  const HandshakeParams old_gen = Params(7, 11);
  AnsweredChallenge answered;
  ASSERT_TRUE(AnswerChallenge(old_gen, 2, 0, Nonce(2), EncodeChallenge(old_gen, 0, Nonce(1)), &answered).ok());
  AcceptedResponse accepted;
  EXPECT_EQ(CheckResponse(Params(7, 12), 0, Nonce(1), answered.response, &accepted).reason,
            RejectReason::kWrongGeneration);
  // And the generation is MACed: rewriting the field does not help.
  std::string rewritten = answered.response;
  rewritten[kHandshakeHeaderBytes + 7] = 12;
  EXPECT_EQ(CheckResponse(Params(7, 12), 0, Nonce(1), rewritten, &accepted).reason, RejectReason::kBadMac);
}

TEST(TcpMeshHandshake, TruncatedAndOversizedFramesAreRefused) {
  const HandshakeParams params = Params();
  const Transcript t = Exchange(params, params, Nonce(1), Nonce(2));
  ASSERT_TRUE(t.check.ok());
  AcceptedResponse accepted;
  for (size_t n : {size_t{0}, size_t{3}, size_t{8}, kResponseBytes - 1}) {
    EXPECT_EQ(CheckResponse(params, 0, Nonce(1), t.response.substr(0, n), &accepted).reason, RejectReason::kTruncated)
        << n;
  }
  HandshakeVerdict verdict = CheckResponse(params, 0, Nonce(1), t.response + "x", &accepted);
  EXPECT_EQ(verdict.reason, RejectReason::kOversized);
  EXPECT_EQ(verdict.detail, "response frame of 85 bytes, expected 84");
  AnsweredChallenge answered;
  EXPECT_EQ(AnswerChallenge(params, 2, 0, Nonce(2), t.challenge.substr(0, 20), &answered).reason,
            RejectReason::kTruncated);
  EXPECT_EQ(CheckConfirm(params, 2, 0, Nonce(1), Nonce(2), t.confirm + std::string(1000, 'a')).reason,
            RejectReason::kOversized);
}

TEST(TcpMeshHandshake, GarbageIsRefusedOnItsFirstBytes) {
  EXPECT_EQ(CheckFramePrefix("G", HandshakeFrame::kResponse).reason, RejectReason::kBadMagic);
  EXPECT_EQ(CheckFramePrefix("GET / HTTP/1.1\r\n", HandshakeFrame::kResponse).reason, RejectReason::kBadMagic);
  EXPECT_EQ(CheckFramePrefix(std::string("HRDM\x02", 5), HandshakeFrame::kResponse).reason, RejectReason::kBadVersion);
  EXPECT_EQ(CheckFramePrefix(std::string("HRDM\x01\x01", 6), HandshakeFrame::kResponse).reason,
            RejectReason::kBadFrameType);
  EXPECT_EQ(CheckFramePrefix(std::string("HRDM\x01\x02\x00\x01", 8), HandshakeFrame::kResponse).reason,
            RejectReason::kBadPadding);
  // Consistent prefixes of any length are not faults (yet).
  EXPECT_TRUE(CheckFramePrefix("", HandshakeFrame::kResponse).ok());
  EXPECT_TRUE(CheckFramePrefix("HR", HandshakeFrame::kResponse).ok());
  EXPECT_TRUE(CheckFramePrefix(std::string("HRDM\x01\x02\x00", 7), HandshakeFrame::kResponse).ok());

  // Whole frames of junk through the full checks.
  const HandshakeParams params = Params();
  AcceptedResponse accepted;
  EXPECT_EQ(CheckResponse(params, 0, Nonce(1), std::string(kResponseBytes, '\xff'), &accepted).reason,
            RejectReason::kBadMagic);
  const Transcript t = Exchange(params, params, Nonce(1), Nonce(2));
  // A challenge where a response belongs (a reflected first frame).
  EXPECT_EQ(CheckResponse(params, 0, Nonce(1), t.challenge, &accepted).reason, RejectReason::kBadFrameType);
  // Every single-bit flip of a valid response is refused.
  for (size_t byte = 0; byte < kResponseBytes; ++byte) {
    std::string flipped = t.response;
    flipped[byte] ^= 0x01;
    EXPECT_FALSE(CheckResponse(params, 0, Nonce(1), flipped, &accepted).ok()) << "byte " << byte;
  }
}

TEST(TcpMeshHandshake, ReasonNamesAreStable) {
  EXPECT_STREQ(RejectReasonName(RejectReason::kBadMac), "bad_mac");
  EXPECT_STREQ(RejectReasonName(RejectReason::kTimeout), "timeout");
  EXPECT_STREQ(RejectReasonName(RejectReason::kOverloaded), "overloaded");
}

}  // namespace
}  // namespace herd
