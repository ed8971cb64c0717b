// FormTcpMesh with every rank a thread, on 127.0.0.1, through an
// in-memory rendezvous store.
#include "worker/comm/tcp_mesh_formation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "worker/comm/testing/ending_store.h"
#include "worker/comm/in_memory_store.h"
#include "worker/comm/tcp_mesh_key_exchange.h"
#include "worker/comm/tcp_socket.h"

namespace herd {
namespace {

using std::chrono::milliseconds;

TcpMeshFormationOptions Options(int rank, int world) {
  TcpMeshFormationOptions options;
  options.key_prefix = "job/3/";
  options.generation = 3;
  options.rank = rank;
  options.world_size = world;
  options.listen_host = "127.0.0.1";
  options.advertise_host = "127.0.0.1";
  options.timeout = milliseconds(20000);
  return options;
}

std::string RecvExactly(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

TEST(TcpMeshFormation, SplitHostPort) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("10.0.0.1:123", &host, &port).ok());
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 123);
  ASSERT_TRUE(SplitHostPort("[::1]:9", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9);
  for (const char* bad : {"nohost", ":1", "h:0", "h:70000", "h:x"}) {
    absl::Status status = SplitHostPort(bad, &host, &port);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(status.message(), bad)) << status;
  }
}

// Every pair of ranks holds one connected socket pair, and bytes sent on
// one end arrive first and unchanged at the other. An outsider who connects
// to rank 0's published port mid-formation is refused and reported, and
// changes nothing.
TEST(TcpMeshFormation, EveryPairIsConnectedDespiteAnOutsider) {
  constexpr int kWorld = 4;
  InMemoryStore store;
  absl::Mutex mu;
  std::vector<RejectedConnection> rejected;
  std::vector<absl::StatusOr<std::vector<UniqueFd>>> meshes(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      TcpMeshFormationOptions options = Options(rank, kWorld);
      options.on_rejected = [&](const RejectedConnection& r) {
        absl::MutexLock lock(&mu);
        rejected.push_back(r);
      };
      if (rank == kWorld - 1) {
        // The last rank holds back until the outsider was refused, so rank
        // 0's port is certainly still open when the outsider comes.
        absl::MutexLock lock(&mu);
        auto seen = [&] { return !rejected.empty(); };
        mu.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(20));
      }
      meshes[rank] = FormTcpMesh(store, options);
    });
  }
  std::string address;
  ASSERT_TRUE(store.Get(TcpMeshAddressStoreKey("job/3/", 0), milliseconds(20000), &address).ok());
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort(address, &host, &port).ok());
  {
    UniqueFd outsider(socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(outsider.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    const std::string junk = "GET / HTTP/1.0\r\n\r\n";
    send(outsider.get(), junk.data(), junk.size(), MSG_NOSIGNAL);
    for (auto& t : threads) t.join();
  }

  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(meshes[rank].ok()) << rank << ": " << meshes[rank].status();
    ASSERT_EQ(meshes[rank]->size(), static_cast<size_t>(kWorld));
    EXPECT_FALSE((*meshes[rank])[rank].valid());
  }
  for (int a = 0; a < kWorld; ++a) {
    for (int b = 0; b < kWorld; ++b) {
      if (a == b) continue;
      const int from = (*meshes[a])[b].get(), to = (*meshes[b])[a].get();
      EXPECT_EQ(PeerAddressOf(from), LocalAddressOf(to)) << a << "->" << b;
      const std::string message = "from " + std::to_string(a) + " to " + std::to_string(b);
      ASSERT_EQ(send(from, message.data(), message.size(), MSG_NOSIGNAL), static_cast<ssize_t>(message.size()));
      EXPECT_EQ(RecvExactly(to, message.size()), message);
    }
  }
  absl::MutexLock lock(&mu);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].reason, RejectReason::kBadMagic);
}

TEST(TcpMeshFormation, MissingRankTimesOutNamingIt) {
  InMemoryStore store;
  TcpMeshFormationOptions options = Options(0, 2);
  options.timeout = milliseconds(200);
  auto mesh = FormTcpMesh(store, options);
  EXPECT_EQ(mesh.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(mesh.status().message(), "rank 1 did not connect")) << mesh.status();
}

TEST(TcpMeshFormation, AnImpostorWithAnotherKeyIsRefusedAndTheRealRankJoins) {
  // The impostor holds a key of its own (as a member of another generation
  // would) and rank 0's address: rank 0 refuses and reports it, then forms
  // its mesh with the real rank 1.
  InMemoryStore store;
  std::vector<RejectedConnection> rejected;
  absl::Mutex mu;
  absl::StatusOr<std::vector<UniqueFd>> zero;
  std::thread t([&] {
    TcpMeshFormationOptions options = Options(0, 2);
    options.on_rejected = [&](const RejectedConnection& r) {
      absl::MutexLock lock(&mu);
      rejected.push_back(r);
    };
    zero = FormTcpMesh(store, options);
  });
  std::string address;
  ASSERT_TRUE(store.Get(TcpMeshAddressStoreKey("job/3/", 0), milliseconds(20000), &address).ok());
  InMemoryStore other;
  ASSERT_TRUE(other.Set("job/3/member-key", std::string(32, 'k')).ok());
  ASSERT_TRUE(other.Set(TcpMeshAddressStoreKey("job/3/", 0), address).ok());
  auto impostor = FormTcpMesh(other, Options(1, 2));
  EXPECT_EQ(impostor.status().code(), absl::StatusCode::kUnauthenticated) << impostor.status();
  auto one = FormTcpMesh(store, Options(1, 2));
  t.join();
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(PeerAddressOf((*zero)[1].get()), LocalAddressOf((*one)[0].get()));
  absl::MutexLock lock(&mu);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_EQ(rejected[0].reason, RejectReason::kBadMac);
}

TEST(TcpMeshFormation, AGenerationThatEndsWhileWaitingForAHigherRankEndsTheWaitSoon) {
  // Rank 1 never comes (it died); the coordinator ends the generation. Rank
  // 0, waiting on its own listener, must notice through the store well
  // before its 20 s formation timeout.
  EndingStore store;
  std::thread ender([&] {
    std::string key;
    ASSERT_TRUE(store.Get(TcpMeshAddressStoreKey("job/3/", 0), milliseconds(10000), &key).ok());
    store.End();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<UniqueFd>> mesh = FormTcpMesh(store, Options(0, 2));
  const auto took = std::chrono::steady_clock::now() - start;
  ender.join();
  ASSERT_FALSE(mesh.ok());
  EXPECT_EQ(mesh.status().code(), absl::StatusCode::kFailedPrecondition) << mesh.status();
  EXPECT_TRUE(absl::StrContains(mesh.status().message(), "waiting for rank 1")) << mesh.status();
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(TcpMeshFormation, AGenerationThatEndsWhileDialingADeadLowerRankEndsTheDialSoon) {
  // Rank 0 published its key and address, then died: nothing listens there
  // any more, so rank 1's dial is refused and retried. The coordinator ends
  // the generation; rank 1 must notice through the store well before its
  // 20 s formation timeout.
  EndingStore store;
  ASSERT_TRUE(ShareMemberKey(store, "job/3/", 0, milliseconds(1000)).ok());
  int closed_port = 0;
  {
    UniqueFd s(socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    socklen_t length = sizeof(a);
    ASSERT_EQ(getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &length), 0);
    closed_port = ntohs(a.sin_port);
  }  // bound, never listening, now closed: connects are refused
  ASSERT_TRUE(store.Set(TcpMeshAddressStoreKey("job/3/", 0), absl::StrCat("127.0.0.1:", closed_port)).ok());
  std::atomic<bool> returned{false};
  std::thread ender([&] {
    // Rank 1 reads the key once to join, then again at each check between
    // refused dials: end the generation once it is dialing.
    while (store.reads(MemberKeyStoreKey("job/3/")) < 2 && !returned) std::this_thread::sleep_for(milliseconds(5));
    store.End();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<UniqueFd>> mesh = FormTcpMesh(store, Options(1, 2));
  const auto took = std::chrono::steady_clock::now() - start;
  returned = true;
  ender.join();
  ASSERT_FALSE(mesh.ok());
  EXPECT_EQ(mesh.status().code(), absl::StatusCode::kFailedPrecondition) << mesh.status();
  EXPECT_TRUE(absl::StrContains(mesh.status().message(), "rank 0 at 127.0.0.1")) << mesh.status();
  EXPECT_TRUE(absl::StrContains(mesh.status().message(), EndingStore::kEndedMessage)) << mesh.status();
  EXPECT_LT(took, std::chrono::seconds(5));
}

}  // namespace
}  // namespace herd
