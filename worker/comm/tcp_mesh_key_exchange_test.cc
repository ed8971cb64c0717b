#include "worker/comm/tcp_mesh_key_exchange.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "worker/comm/in_memory_store.h"

namespace herd {
namespace {

using std::chrono::milliseconds;

TEST(TcpMeshKeyExchange, EveryRankGetsRankZerosKey) {
  InMemoryStore store;
  constexpr int kWorld = 4;
  std::vector<absl::StatusOr<MemberKey>> keys(kWorld);
  std::vector<std::thread> threads;
  // The readers start first: they wait for rank 0.
  for (int rank = kWorld - 1; rank >= 0; --rank) {
    threads.emplace_back([&, rank] { keys[rank] = ShareMemberKey(store, "job/7/", rank, milliseconds(20000)); });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(keys[rank].ok()) << rank << ": " << keys[rank].status();
    EXPECT_EQ(*keys[rank], *keys[0]) << rank;
  }
  std::string stored;
  ASSERT_TRUE(store.Get("job/7/member-key", milliseconds(0), &stored).ok());
  EXPECT_EQ(stored, MemberKeyBytes(*keys[0]));
}

TEST(TcpMeshKeyExchange, EachGenerationGetsItsOwnKey) {
  InMemoryStore store;
  auto first = ShareMemberKey(store, "job/7/", 0, milliseconds(0));
  auto second = ShareMemberKey(store, "job/8/", 0, milliseconds(0));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE(*first, *second);
}

TEST(TcpMeshKeyExchange, MissingKeyTimesOutNamingIt) {
  InMemoryStore store;
  auto key = ShareMemberKey(store, "job/7/", 1, milliseconds(20));
  EXPECT_EQ(key.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(key.status().message(), "job/7/member-key")) << key.status();
}

TEST(TcpMeshKeyExchange, MalformedKeyIsRefusedNamingIt) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("job/7/member-key", "short").ok());
  auto key = ShareMemberKey(store, "job/7/", 2, milliseconds(20));
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(key.status().message(), "job/7/member-key: member key: 5 bytes, expected 32");
}

}  // namespace
}  // namespace herd
