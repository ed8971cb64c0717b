// TcpMeshListener and ConnectToTcpMeshPeer over real sockets on 127.0.0.1.
#include "worker/comm/tcp_mesh_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "worker/comm/peer_fault.h"
#include "worker/comm/tcp_mesh_connector.h"
#include "worker/comm/tcp_socket.h"

namespace herd {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kGenerous{20000};  // for waits that normally take milliseconds

HandshakeParams Params(int world, uint8_t key_fill = 0x5a, int64_t generation = 42) {
  HandshakeParams params;
  params.key.fill(key_fill);
  params.generation = generation;
  params.world_size = world;
  return params;
}

// Collects the listener's rejections; waits for a count of them.
class Rejections {
 public:
  std::function<void(const RejectedConnection&)> Callback() {
    return [this](const RejectedConnection& r) {
      absl::MutexLock lock(&mu_);
      all_.push_back(r);
    };
  }
  // Waits until at least `n` arrived; returns a copy of them all.
  std::vector<RejectedConnection> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return all_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::FromChrono(kGenerous));
    return all_;
  }
  std::vector<RejectedConnection> Now() {
    absl::MutexLock lock(&mu_);
    return all_;
  }

 private:
  absl::Mutex mu_;
  std::vector<RejectedConnection> all_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<TcpMeshListener> StartListener(const HandshakeParams& params, Rejections* rejections,
                                              milliseconds handshake_timeout = milliseconds(5000),
                                              size_t max_handshakes = 512, int port = 0) {
  TcpMeshListenerOptions options;
  options.params = params;
  options.rank = 0;
  options.host = "127.0.0.1";
  options.port = port;
  options.handshake_timeout = handshake_timeout;
  options.max_handshakes = max_handshakes;
  options.on_rejected = rejections->Callback();
  auto listener = TcpMeshListener::Start(std::move(options));
  EXPECT_TRUE(listener.ok()) << listener.status();
  return listener.ok() ? std::move(*listener) : nullptr;
}

absl::StatusOr<UniqueFd> Connect(const HandshakeParams& params, int rank, int port,
                                 milliseconds timeout = kGenerous) {
  TcpMeshConnectOptions options;
  options.params = params;
  options.rank = rank;
  options.peer_rank = 0;
  options.host = "127.0.0.1";
  options.port = port;
  options.timeout = timeout;
  return ConnectToTcpMeshPeer(options);
}

// A plain TCP connection, as an outsider makes it.
UniqueFd RawConnect(int port) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << std::strerror(errno);
  return fd;
}

void SendRaw(int fd, const std::string& bytes) {
  EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// Reads exactly `n` bytes from a blocking socket, waiting with poll.
std::string RecvExactly(int fd, size_t n) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + kGenerous;
  while (out.size() < n) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, PollMillisUntil(deadline)) <= 0) break;
    char buffer[256];
    const ssize_t got = recv(fd, buffer, std::min(sizeof(buffer), n - out.size()), 0);
    if (got <= 0) break;
    out.append(buffer, static_cast<size_t>(got));
  }
  return out;
}

// True once the other end closed (EOF or reset).
bool ClosedByPeer(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + kGenerous;
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, PollMillisUntil(deadline)) <= 0) return false;
    char buffer[256];
    const ssize_t got = recv(fd, buffer, sizeof(buffer), 0);
    if (got <= 0) return true;
  }
}

// Bytes written on one end arrive unchanged, and first, on the other: the
// handshake left nothing behind in either direction.
void ExpectCleanStream(int a, int b, const std::string& tag) {
  const std::string there = "data-plane bytes " + tag + " a->b";
  const std::string back = "data-plane bytes " + tag + " b->a";
  SendRaw(a, there);
  SendRaw(b, back);
  EXPECT_EQ(RecvExactly(b, there.size()), there);
  EXPECT_EQ(RecvExactly(a, back.size()), back);
}

// A response frame made with `params` for a challenge read off a socket.
std::string ResponseFor(const HandshakeParams& params, int rank, const std::string& challenge) {
  AnsweredChallenge answered;
  HandshakeNonce nonce;
  nonce.fill(0x33);
  EXPECT_TRUE(AnswerChallenge(params, rank, 0, nonce, challenge, &answered).ok());
  return answered.response;
}

TEST(TcpMeshListener, PeersAuthenticateAndTheirStreamsStartClean) {
  const HandshakeParams params = Params(3);
  Rejections rejections;
  auto listener = StartListener(params, &rejections);
  ASSERT_NE(listener, nullptr);
  absl::StatusOr<UniqueFd> c1, c2;
  std::thread t1([&] { c1 = Connect(params, 1, listener->port()); });
  std::thread t2([&] { c2 = Connect(params, 2, listener->port()); });
  auto l1 = listener->TakePeer(1, kGenerous);
  auto l2 = listener->TakePeer(2, kGenerous);
  t1.join();
  t2.join();
  ASSERT_TRUE(c1.ok()) << c1.status();
  ASSERT_TRUE(c2.ok()) << c2.status();
  ASSERT_TRUE(l1.ok()) << l1.status();
  ASSERT_TRUE(l2.ok()) << l2.status();
  // Each listener socket is the one its rank connected from.
  EXPECT_EQ(PeerAddressOf(l1->get()), LocalAddressOf(c1->get()));
  EXPECT_EQ(PeerAddressOf(l2->get()), LocalAddressOf(c2->get()));
  ExpectCleanStream(l1->get(), c1->get(), "rank 1");
  ExpectCleanStream(l2->get(), c2->get(), "rank 2");

  EXPECT_EQ(listener->TakePeer(1, milliseconds(1)).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(listener->TakePeer(0, milliseconds(1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(listener->TakePeer(3, milliseconds(1)).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rejections.Now().empty());
}

TEST(TcpMeshListener, TakePeerGivesUpAtItsTimeout) {
  Rejections rejections;
  auto listener = StartListener(Params(3), &rejections);
  ASSERT_NE(listener, nullptr);
  auto taken = listener->TakePeer(2, milliseconds(50));
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(taken.status().message(), "rank 2 did not connect")) << taken.status();
  // Blamed late: the coordinator leaves out the rank that never came.
  const std::optional<PeerFault> fault = PeerFaultOf(taken.status());
  ASSERT_TRUE(fault.has_value());
  EXPECT_EQ(fault->kind, PeerFaultKind::kLate);
  EXPECT_EQ(fault->rank, 2);
}

TEST(TcpMeshListener, WrongKeyIsRefusedAuditedAndLeavesTheRankFree) {
  const HandshakeParams params = Params(2);
  Rejections rejections;
  auto listener = StartListener(params, &rejections);
  ASSERT_NE(listener, nullptr);
  auto impostor = Connect(Params(2, /*key_fill=*/0x11), 1, listener->port());
  EXPECT_EQ(impostor.status().code(), absl::StatusCode::kUnauthenticated) << impostor.status();
  auto seen = rejections.WaitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].reason, RejectReason::kBadMac);
  EXPECT_TRUE(absl::StartsWith(seen[0].peer, "127.0.0.1:")) << seen[0].peer;
  EXPECT_TRUE(absl::StartsWith(AuditLine(seen[0]), "audit: data-plane connection from 127.0.0.1:"));
  EXPECT_TRUE(absl::StrContains(AuditLine(seen[0]), "refused (bad_mac): response claiming rank 1"))
      << AuditLine(seen[0]);

  // The real rank 1 still gets in.
  absl::StatusOr<UniqueFd> real;
  std::thread t([&] { real = Connect(params, 1, listener->port()); });
  auto accepted = listener->TakePeer(1, kGenerous);
  t.join();
  ASSERT_TRUE(real.ok()) << real.status();
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ExpectCleanStream(accepted->get(), real->get(), "after impostor");
}

TEST(TcpMeshListener, ConnectorRefusesAListenerOfAnotherGeneration) {
  Rejections rejections;
  auto listener = StartListener(Params(2, 0x5a, /*generation=*/43), &rejections);
  ASSERT_NE(listener, nullptr);
  auto stale = Connect(Params(2, 0x5a, /*generation=*/42), 1, listener->port());
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(absl::StrContains(stale.status().message(), "wrong_generation: generation 43, expected 42"))
      << stale.status();
  // The connector hung up without answering: the listener audits that too.
  auto seen = rejections.WaitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].reason, RejectReason::kTruncated);
}

TEST(TcpMeshListener, SecondConnectionForAConnectedRankIsRefused) {
  const HandshakeParams params = Params(2);
  Rejections rejections;
  auto listener = StartListener(params, &rejections);
  ASSERT_NE(listener, nullptr);
  auto first = Connect(params, 1, listener->port());
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Connect(params, 1, listener->port());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnauthenticated) << second.status();
  auto seen = rejections.WaitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].reason, RejectReason::kDuplicateRank);
  auto accepted = listener->TakePeer(1, kGenerous);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ExpectCleanStream(accepted->get(), first->get(), "first of rank 1");
}

TEST(TcpMeshListener, OverloadedListenerRefusesAtOnceAndRecovers) {
  const HandshakeParams params = Params(2);
  Rejections rejections;
  auto listener = StartListener(params, &rejections, milliseconds(60000), /*max_handshakes=*/2);
  ASSERT_NE(listener, nullptr);
  // Two idle connections fill the listener (each has its challenge: accepted).
  UniqueFd idle1 = RawConnect(listener->port()), idle2 = RawConnect(listener->port());
  ASSERT_EQ(RecvExactly(idle1.get(), kChallengeBytes).size(), kChallengeBytes);
  ASSERT_EQ(RecvExactly(idle2.get(), kChallengeBytes).size(), kChallengeBytes);
  UniqueFd extra = RawConnect(listener->port());
  const std::string extra_address = LocalAddressOf(extra.get());
  EXPECT_TRUE(ClosedByPeer(extra.get()));
  auto seen = rejections.WaitFor(1);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].reason, RejectReason::kOverloaded);
  EXPECT_EQ(seen[0].peer, extra_address);
  // Hanging up frees the slots (audited as cut short), and a member gets in.
  idle1.reset();
  idle2.reset();
  seen = rejections.WaitFor(3);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[1].reason, RejectReason::kTruncated);
  EXPECT_EQ(seen[2].reason, RejectReason::kTruncated);
  absl::StatusOr<UniqueFd> member = Connect(params, 1, listener->port());
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_TRUE(listener->TakePeer(1, kGenerous).ok());
}

TEST(TcpMeshConnector, RetriesWhileTheListenerIsNotUpYet) {
  const HandshakeParams params = Params(2);
  // A port that first closes connections at once (as an overloaded listener
  // does), then refuses them, then has the real listener.
  absl::StatusOr<UniqueFd> busy = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(busy.ok());
  const int port = LocalPortOf(busy->get());
  ASSERT_TRUE(SetNonBlocking(busy->get(), false).ok());
  absl::StatusOr<UniqueFd> member;
  std::thread t([&] { member = Connect(params, 1, port); });
  for (int tries = 0; tries < 2; ++tries) {  // the connector came back after a close
    UniqueFd accepted(accept(busy->get(), nullptr, nullptr));
    ASSERT_TRUE(accepted.valid());
  }
  busy->reset();
  Rejections rejections;
  auto listener = StartListener(params, &rejections, milliseconds(5000), 512, port);
  ASSERT_NE(listener, nullptr);
  auto accepted = listener->TakePeer(1, kGenerous);
  t.join();
  ASSERT_TRUE(member.ok()) << member.status();
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  ExpectCleanStream(accepted->get(), member->get(), "after retries");
}

TEST(TcpMeshConnector, GivesUpAtItsDeadlineOnASilentPort) {
  // Connections complete in the kernel's backlog, but nothing ever speaks.
  absl::StatusOr<UniqueFd> silent = ListenTcp("127.0.0.1", 0);
  ASSERT_TRUE(silent.ok());
  const auto started = std::chrono::steady_clock::now();
  auto result = Connect(Params(2), 1, LocalPortOf(silent->get()), milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "no challenge")) << result.status();
  EXPECT_GE(took, milliseconds(300));
  EXPECT_LT(took, milliseconds(10000));
}

TEST(TcpMeshConnector, RejectsBadOptions) {
  EXPECT_EQ(Connect(Params(2), 0, 1000).status().code(), absl::StatusCode::kInvalidArgument);  // its own rank
  EXPECT_EQ(Connect(Params(2), 2, 1000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Connect(Params(2), 1, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// An outsider flood at the transport: while real peers connect (one
// before, two during), the listener is flooded with idle, random,
// truncated, stalled, replayed, oversized and wrong-key connections. Every
// real peer gets a clean authenticated socket, and every bad connection is
// closed and reported once, with its address and reason.
TEST(TcpMeshListener, FloodOfBadConnectionsLeavesRealPeersUntouched) {
  constexpr int kWorld = 4;
  constexpr int kEach = 12;  // connections of each bad kind
  const HandshakeParams params = Params(kWorld);
  const HandshakeParams wrong_key = Params(kWorld, 0x11);
  Rejections rejections;
  auto listener = StartListener(params, &rejections, milliseconds(3000));
  ASSERT_NE(listener, nullptr);
  const int port = listener->port();

  auto c1 = Connect(params, 1, port);
  ASSERT_TRUE(c1.ok()) << c1.status();
  auto l1 = listener->TakePeer(1, kGenerous);
  ASSERT_TRUE(l1.ok()) << l1.status();

  std::map<std::string, RejectReason> expected;  // outsider's address -> reason
  std::vector<UniqueFd> held;                    // kept open until the end
  auto open = [&](RejectReason reason) -> int {
    held.push_back(RawConnect(port));
    expected[LocalAddressOf(held.back().get())] = reason;
    return held.back().get();
  };
  std::mt19937 random(1234);
  // A response a member made for another connection's challenge: what a
  // recording of real traffic holds.
  std::string recorded;
  {
    const int earlier = open(RejectReason::kTruncated);  // hangs up after reading
    recorded = ResponseFor(params, 2, RecvExactly(earlier, kChallengeBytes));
    held.back().reset();
  }
  const std::string wrong_response = ResponseFor(wrong_key, 3, EncodeChallenge(wrong_key, 0, HandshakeNonce{}));

  std::vector<absl::StatusOr<UniqueFd>> impostors(2 * kEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) impostors[t * kEach + i] = Connect(wrong_key, 2 + t, port);
    });
  }
  absl::StatusOr<UniqueFd> c2, c3;
  for (int i = 0; i < kEach; ++i) {
    open(RejectReason::kTimeout);  // idle
    std::string junk(1024, '\0');
    for (char& c : junk) c = static_cast<char>(random());
    junk[0] = 'X';
    SendRaw(open(RejectReason::kBadMagic), junk);
    const int cut = open(RejectReason::kTruncated);
    SendRaw(cut, recorded.substr(0, 30));
    shutdown(cut, SHUT_WR);
    SendRaw(open(RejectReason::kTimeout), recorded.substr(0, 30));  // stalls mid-frame
    const int replay = open(RejectReason::kBadMac);
    EXPECT_EQ(RecvExactly(replay, kChallengeBytes).size(), kChallengeBytes);
    SendRaw(replay, recorded);
    const int oversized = open(RejectReason::kOversized);
    EXPECT_EQ(RecvExactly(oversized, kChallengeBytes).size(), kChallengeBytes);
    SendRaw(oversized, wrong_response + "!");
    if (i == kEach / 2) {  // the real peers arrive in the middle of it
      threads.emplace_back([&] { c2 = Connect(params, 2, port); });
      threads.emplace_back([&] { c3 = Connect(params, 3, port); });
    }
  }
  for (auto& t : threads) t.join();

  auto l2 = listener->TakePeer(2, kGenerous);
  auto l3 = listener->TakePeer(3, kGenerous);
  ASSERT_TRUE(c2.ok()) << c2.status();
  ASSERT_TRUE(c3.ok()) << c3.status();
  ASSERT_TRUE(l2.ok()) << l2.status();
  ASSERT_TRUE(l3.ok()) << l3.status();
  for (const auto& impostor : impostors) {
    EXPECT_EQ(impostor.status().code(), absl::StatusCode::kUnauthenticated) << impostor.status();
  }

  const size_t total = expected.size() + impostors.size();
  const std::vector<RejectedConnection> seen = rejections.WaitFor(total);
  ASSERT_EQ(seen.size(), total);
  std::map<std::string, int> reports_per_address;
  int impostor_reports = 0;
  for (const RejectedConnection& r : seen) {
    ++reports_per_address[r.peer];
    auto want = expected.find(r.peer);
    if (want == expected.end()) {
      // Not one we opened by hand: a wrong-key connector.
      EXPECT_EQ(r.reason, RejectReason::kBadMac) << AuditLine(r);
      ++impostor_reports;
      continue;
    }
    EXPECT_EQ(r.reason, want->second) << AuditLine(r);
  }
  EXPECT_EQ(impostor_reports, 2 * kEach);
  for (const auto& [address, reason] : expected) {
    EXPECT_EQ(reports_per_address[address], 1) << address << " expected " << RejectReasonName(reason);
  }
  for (const auto* real : {&c1, &c2, &c3}) {
    EXPECT_EQ(reports_per_address.count(LocalAddressOf((*real)->get())), 0u);
  }
  // Every real pair still carries data cleanly, rank 1's included, which
  // was connected before the flood began.
  ExpectCleanStream(l1->get(), c1->get(), "rank 1");
  ExpectCleanStream(l2->get(), c2->get(), "rank 2");
  ExpectCleanStream(l3->get(), c3->get(), "rank 3");
}

}  // namespace
}  // namespace herd
