#include "worker/train/generation/healing.h"

#include <gtest/gtest.h>

#include <mutex>

#include "common/sha256.h"
#include "worker/comm/testing/gloo_test_ranks.h"

namespace herd {
namespace {

struct Held {
  int64_t generation = -1;
  int64_t step = -1;
  std::map<std::string, std::string> files;
};

Held State(int64_t generation, int64_t step, const std::string& tag) {
  return Held{generation, step, {{"model.pt", tag}, {"position.txt", "step " + std::to_string(step)}}};
}

TEST(EncodeFiles, RoundTripsAndRejectsTruncation) {
  const std::map<std::string, std::string> files = {{"a", std::string("x\0y", 3)}, {"empty", ""}};
  const std::string bytes = EncodeFiles(files);
  auto decoded = DecodeFiles(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, files);
  for (size_t cut : {size_t{0}, size_t{5}, bytes.size() - 1}) {
    EXPECT_EQ(DecodeFiles(bytes.substr(0, cut)).status().code(), absl::StatusCode::kInvalidArgument) << cut;
  }
  EXPECT_EQ(DecodeFiles(bytes + "z").status().code(), absl::StatusCode::kInvalidArgument);
}

// Rank 1 is a joiner with nothing; rank 0 committed step 20 of generation 2,
// rank 2 finished step 30 of generation 2 (its peers failed before that
// commit). The newest commit wins and reaches every rank, the joiner too.
// A heal transfer is checked end to end: bytes that do not hash to what
// the source sent fail as a transfer failure (UNAVAILABLE, so the
// generation re-forms and heals again), naming the source.
TEST(Healing, CorruptedHealBytesAreRefused) {
  const std::string bytes = EncodeFiles({{"model.pt", "weights"}, {"position.txt", "step 7"}});
  const std::string digest = Sha256Hex(bytes);
  EXPECT_TRUE(CheckHealBytes(bytes, digest, 2).ok());
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x01;
  const absl::Status corrupt = CheckHealBytes(flipped, digest, 2);
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(corrupt.message().find("from rank 2"), std::string::npos) << corrupt;
  EXPECT_NE(corrupt.message().find(digest), std::string::npos) << corrupt;
  EXPECT_EQ(CheckHealBytes(bytes.substr(1), digest, 0).code(), absl::StatusCode::kUnavailable);
}

TEST(Healing, NewestCommitIsChosenAndBroadcast) {
  const std::vector<Held> held = {State(2, 20, "old"), Held{}, State(2, 30, "new")};
  std::mutex mu;
  std::vector<int> sources(3, -2);
  std::vector<std::map<std::string, std::string>> received(3);
  HealSource chosen;
  RunGlooRanks(3, [&](int rank, Communicator* comm) {
    auto source = ChooseHealSource(comm, held[rank].generation, held[rank].step);
    ASSERT_TRUE(source.ok()) << source.status();
    std::map<std::string, std::string> files = held[rank].files;
    ASSERT_TRUE(BroadcastFiles(comm, source->rank, &files).ok());
    std::lock_guard<std::mutex> lock(mu);
    sources[rank] = source->rank;
    received[rank] = files;
    chosen = *source;
  });
  EXPECT_EQ(sources, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(chosen.generation, 2);
  EXPECT_EQ(chosen.step, 30);
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(received[rank], held[2].files) << rank;
}

// A commit of a later generation beats a higher step of an earlier one: the
// earlier generation's history was abandoned.
TEST(Healing, LaterGenerationBeatsHigherStep) {
  const std::vector<Held> held = {State(3, 40, "stale branch"), State(4, 35, "current")};
  std::vector<int> sources(2, -2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto source = ChooseHealSource(comm, held[rank].generation, held[rank].step);
    ASSERT_TRUE(source.ok()) << source.status();
    sources[rank] = source->rank;
  });
  EXPECT_EQ(sources, (std::vector<int>{1, 1}));
}

TEST(Healing, NobodyHoldingStateChoosesNoSource) {
  std::vector<int> sources(2, -2);
  RunGlooRanks(2, [&](int rank, Communicator* comm) {
    auto source = ChooseHealSource(comm, -1, rank == 0 ? 7 : -1);  // holding nothing
    ASSERT_TRUE(source.ok()) << source.status();
    sources[rank] = source->rank;
  });
  EXPECT_EQ(sources, (std::vector<int>{-1, -1}));
}

TEST(Healing, TiesGoToTheLowestRank) {
  const std::vector<Held> held = {State(2, 10, "a"), State(2, 10, "b"), State(2, 10, "c")};
  std::vector<int> sources(3, -2);
  RunGlooRanks(3, [&](int rank, Communicator* comm) {
    auto source = ChooseHealSource(comm, held[rank].generation, held[rank].step);
    ASSERT_TRUE(source.ok());
    sources[rank] = source->rank;
  });
  EXPECT_EQ(sources, (std::vector<int>{0, 0, 0}));
}

}  // namespace
}  // namespace herd
