#include "worker/train/sync/island_layout.h"

#include <gtest/gtest.h>

namespace herd {
namespace {

google::protobuf::RepeatedPtrField<v1::Peer> Peers(const std::vector<std::string>& sites) {
  google::protobuf::RepeatedPtrField<v1::Peer> peers;
  for (size_t r = 0; r < sites.size(); ++r) {
    v1::Peer* peer = peers.Add();
    peer->set_rank(static_cast<int64_t>(r));
    peer->set_worker_id("w" + std::to_string(r));
    if (!sites[r].empty()) (*peer->mutable_labels())["site"] = sites[r];
  }
  return peers;
}

TEST(IslandLayoutTest, UnevenIslandsShareTheSmallestSize) {
  // Sorted by value: "a" (ranks 2, 3) is island 0, "b" (ranks 0, 1, 4) island 1.
  const auto peers = Peers({"b", "b", "a", "a", "b"});
  auto layout = LayoutIslands(peers, "site", 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->values, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(layout->island_of, (std::vector<int>{1, 1, 0, 0, 1}));
  EXPECT_EQ(layout->ranks, (std::vector<std::vector<int>>{{2, 3}, {0, 1, 4}}));
  EXPECT_EQ(layout->shards, 2);
  EXPECT_EQ(layout->island, 1);
  EXPECT_EQ(layout->position, 2);
  EXPECT_FALSE(layout->owns_shard());
  EXPECT_TRUE(layout->cross.empty());

  auto second = LayoutIslands(peers, "site", 1);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->position, 1);
  EXPECT_TRUE(second->owns_shard());
  EXPECT_EQ(second->cross, (std::vector<int>{3, 1}));
  auto first_of_a = LayoutIslands(peers, "site", 2);
  ASSERT_TRUE(first_of_a.ok());
  EXPECT_EQ(first_of_a->position, 0);
  EXPECT_EQ(first_of_a->cross, (std::vector<int>{2, 0}));
}

TEST(IslandLayoutTest, OneIslandIsEveryRankWithOneMemberCrossGroups) {
  const auto peers = Peers({"x", "x", "x"});
  auto layout = LayoutIslands(peers, "site", 1);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->ranks, (std::vector<std::vector<int>>{{0, 1, 2}}));
  EXPECT_EQ(layout->shards, 3);
  EXPECT_EQ(layout->position, 1);
  EXPECT_EQ(layout->cross, (std::vector<int>{1}));
}

TEST(IslandLayoutTest, MissingLabelNamesTheRankAndWorker) {
  auto layout = LayoutIslands(Peers({"a", "", "b"}), "site", 0);
  ASSERT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(layout.status().message(), "sync.islands_by site: rank 1 (worker w1) has no label site");
  EXPECT_EQ(LayoutIslands(Peers({"a"}), "site", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IslandLayoutTest, ShardsBalanceBytesDeterministically) {
  EXPECT_EQ(AssignShards({100, 10, 60, 50}, 2), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(AssignShards({5, 5, 5}, 2), (std::vector<std::vector<int>>{{0, 2}, {1}}));
  // Fewer tensors than shards: the empty shards come last.
  EXPECT_EQ(AssignShards({8}, 3), (std::vector<std::vector<int>>{{0}, {}, {}}));
}

}  // namespace
}  // namespace herd
