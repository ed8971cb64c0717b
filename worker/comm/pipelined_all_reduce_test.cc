// The pipelined all-reduce with every rank a thread over socketpairs.
#include "worker/comm/pipelined_all_reduce.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"

namespace herd {
namespace {

using std::chrono::milliseconds;

TEST(PipelineOrderTest, EveryPieceOnceEachKindReduceScatterFirst) {
  for (size_t pieces : {0, 1, 2, 5, 9}) {
    for (size_t lookahead : {1, 2, 4, 100}) {
      const auto order = PipelineOrder(pieces, lookahead);
      ASSERT_EQ(order.size(), 2 * pieces);
      std::vector<int> rs_at(pieces, -1), ag_at(pieces, -1);
      for (size_t i = 0; i < order.size(); ++i) {
        auto& at = order[i].kind == SegmentKind::kReduceScatter ? rs_at : ag_at;
        ASSERT_EQ(at[order[i].piece], -1) << "piece " << order[i].piece << " twice";
        at[order[i].piece] = static_cast<int>(i);
      }
      for (size_t k = 0; k < pieces; ++k) {
        EXPECT_LT(rs_at[k], ag_at[k]);
        // Piece k's all-gather comes right after piece min(k + lookahead,
        // pieces - 1)'s reduce-scatter and the all-gathers before it.
        const size_t last_before = std::min(k + lookahead, pieces - 1);
        EXPECT_EQ(ag_at[k], static_cast<int>(last_before + 1 + k))
            << "pieces " << pieces << " lookahead " << lookahead << " k " << k;
      }
    }
  }
}

TEST(PipelineOrderTest, LookaheadTwoOfFour) {
  using K = SegmentKind;
  const std::vector<StreamSegment> expected = {{K::kReduceScatter, 0}, {K::kReduceScatter, 1},
                                               {K::kReduceScatter, 2}, {K::kAllGather, 0},
                                               {K::kReduceScatter, 3}, {K::kAllGather, 1},
                                               {K::kAllGather, 2},     {K::kAllGather, 3}};
  EXPECT_EQ(PipelineOrder(4, 2), expected);
}

// fds[r][q]: rank r's end of the r-q connection.
std::vector<std::vector<int>> Connect(int world) {
  std::vector<std::vector<int>> fds(world, std::vector<int>(world, -1));
  for (int r = 0; r < world; ++r) {
    for (int q = r + 1; q < world; ++q) {
      int pair[2];
      EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
      for (int fd : pair) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      fds[r][q] = pair[0];
      fds[q][r] = pair[1];
    }
  }
  return fds;
}

void CloseAll(std::vector<std::vector<int>>& fds) {
  for (auto& row : fds) {
    for (int& fd : row) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
}

std::vector<float> Input(size_t count, int rank) {
  std::mt19937 random(77 + rank);
  std::uniform_real_distribution<float> real(-10, 10);
  std::vector<float> out(count);
  for (auto& v : out) v = real(random);
  return out;
}

PipelinedAllReduceArgs Args(int rank, int world, const std::vector<int>& fds, size_t piece, size_t lookahead,
                            milliseconds timeout = milliseconds(20000)) {
  PipelinedAllReduceArgs args;
  args.rank = rank;
  args.size = world;
  args.peer_fds = fds;
  args.element_bytes = sizeof(float);
  args.piece_elements = piece;
  args.lookahead = lookahead;
  args.sum = [](char* acc, const char* add, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      float a, b;
      std::memcpy(&a, acc + 4 * i, 4);
      std::memcpy(&b, add + 4 * i, 4);
      a += b;
      std::memcpy(acc + 4 * i, &a, 4);
    }
  };
  args.deadline = std::chrono::steady_clock::now() + timeout;
  return args;
}

TEST(PipelinedAllReduceTest, EveryRankGetsTheRankOrderSumBitwise) {
  for (int world : {2, 3, 4}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{100}, size_t{4099}}) {
      for (size_t piece : {size_t{1}, size_t{7}, size_t{1024}, size_t{1} << 20}) {
        for (size_t lookahead : {size_t{1}, size_t{3}, size_t{1000}}) {
          auto fds = Connect(world);
          std::vector<std::vector<float>> data(world);
          std::vector<WorkTimes> times(world);
          std::vector<absl::Status> status(world);
          std::vector<std::thread> threads;
          for (int r = 0; r < world; ++r) {
            data[r] = Input(count, r);
            threads.emplace_back([&, r] {
              std::vector<std::vector<char>> scratch;
              status[r] = PipelinedAllReduce(reinterpret_cast<char*>(data[r].data()), count,
                                             Args(r, world, fds[r], piece, lookahead), scratch, &times[r]);
            });
          }
          for (auto& t : threads) t.join();
          CloseAll(fds);
          // Rank order, element by element, as a single rank would add.
          std::vector<float> expected = Input(count, 0);
          for (int r = 1; r < world; ++r) {
            const auto in = Input(count, r);
            for (size_t i = 0; i < count; ++i) expected[i] += in[i];
          }
          for (int r = 0; r < world; ++r) {
            ASSERT_TRUE(status[r].ok()) << status[r];
            ASSERT_EQ(std::memcmp(data[r].data(), expected.data(), count * sizeof(float)), 0)
                << "world " << world << " count " << count << " piece " << piece << " lookahead " << lookahead
                << " rank " << r;
            EXPECT_NE(times[r].first_hop.time_since_epoch().count(), 0);
          }
        }
      }
    }
  }
}

TEST(PipelinedAllReduceTest, APeerThatClosesIsUnavailableAndASilentOneTimesOut) {
  auto fds = Connect(2);
  std::vector<float> data(64, 1.0f);
  std::vector<std::vector<char>> scratch;
  close(fds[1][0]);
  fds[1][0] = -1;
  absl::Status closed = PipelinedAllReduce(reinterpret_cast<char*>(data.data()), data.size(),
                                           Args(0, 2, fds[0], 16, 2), scratch, nullptr);
  EXPECT_EQ(closed.code(), absl::StatusCode::kUnavailable) << closed;
  EXPECT_TRUE(absl::StrContains(closed.message(), "rank 1")) << closed;
  CloseAll(fds);

  fds = Connect(2);  // rank 1 never takes part
  absl::Status silent = PipelinedAllReduce(reinterpret_cast<char*>(data.data()), data.size(),
                                           Args(0, 2, fds[0], 16, 2, milliseconds(200)), scratch, nullptr);
  EXPECT_EQ(silent.code(), absl::StatusCode::kDeadlineExceeded) << silent;
  EXPECT_TRUE(absl::StrContains(silent.message(), "rank 1 did not answer in time")) << silent;
  CloseAll(fds);
}

// Rank 2 never takes part: rank 1 is held up too (its all-gathers wait for
// rank 2's data), but rank 0 names rank 2, the one that got least far.
TEST(PipelinedAllReduceTest, ATimeoutNamesTheRankThatHoldsTheOthersUp) {
  auto fds = Connect(3);
  std::vector<float> a(300, 1.0f), b(300, 2.0f);
  absl::Status status0, status1;
  std::thread rank1([&] {
    std::vector<std::vector<char>> scratch;
    status1 = PipelinedAllReduce(reinterpret_cast<char*>(b.data()), b.size(),
                                 Args(1, 3, fds[1], 30, 2, milliseconds(500)), scratch, nullptr);
  });
  std::vector<std::vector<char>> scratch;
  status0 = PipelinedAllReduce(reinterpret_cast<char*>(a.data()), a.size(), Args(0, 3, fds[0], 30, 2, milliseconds(400)),
                               scratch, nullptr);
  rank1.join();
  EXPECT_EQ(status0.code(), absl::StatusCode::kDeadlineExceeded) << status0;
  EXPECT_TRUE(absl::StrContains(status0.message(), "rank 2 did not answer in time")) << status0;
  EXPECT_TRUE(absl::StrContains(status1.message(), "rank 2 did not answer in time")) << status1;
  CloseAll(fds);
}

}  // namespace
}  // namespace herd
