// The TCP mesh's all-reduce over one socket per peer, pipelined.
//
// The buffer is cut into pieces. Each piece is reduce-scattered (every
// peer's copy of this rank's range of the piece comes here and is summed in
// rank order as its bytes arrive) and all-gathered (this rank's summed
// range goes to every peer). Every stream carries its segments in one order
// that both of its ends compute (PipelineOrder): the reduce-scatter data of
// the first `lookahead` pieces, then piece k + lookahead's reduce-scatter
// data followed by piece k's all-gather data, which is sent as soon as this
// rank's range of piece k is summed. So no piece waits for another piece's
// round trip: on a slow link the whole buffer costs about one hop of
// latency plus its bytes, not two hops per piece, and what is summed was
// just received (in cache) on a fast one.
//
// Bits: every element is summed in rank order 0, 1, ..., N-1 by the rank
// whose range holds it, whatever the piece size or lookahead, so every rank
// gets the same bits, the same as an unpipelined reduce-scatter and
// all-gather would give.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "worker/comm/communicator.h"

namespace herd {

enum class SegmentKind { kReduceScatter, kAllGather };

struct StreamSegment {
  SegmentKind kind = SegmentKind::kReduceScatter;
  size_t piece = 0;
  bool operator==(const StreamSegment& o) const { return kind == o.kind && piece == o.piece; }
};

// The order of the segments on every stream of an all-reduce of `pieces`
// pieces: every piece's reduce-scatter segment before its all-gather
// segment, piece order within each kind, and piece k's all-gather right
// after piece min(k + lookahead, pieces - 1)'s reduce-scatter (lookahead
// >= 1; lookahead >= pieces sends every reduce-scatter segment first).
std::vector<StreamSegment> PipelineOrder(size_t pieces, size_t lookahead);

// acc[0, count) += add[0, count) in the buffer's element type.
using SumFunction = std::function<void(char* acc, const char* add, size_t count)>;

struct PipelinedAllReduceArgs {
  int rank = 0;
  int size = 1;
  std::vector<int> peer_fds;  // by rank, non-blocking and connected; this rank's entry unused
  size_t element_bytes = 4;
  size_t piece_elements = 1;  // > 0
  size_t lookahead = 1;       // > 0
  SumFunction sum;
  std::chrono::steady_clock::time_point deadline;
};

// Sums `count` elements at `data` over the ranks, in place. `scratch[r]`
// receives peer r's contributions (grown as needed, kept by the caller
// between ops). Sets times->first_hop when this rank's ranges are all
// summed. Errors as ExchangeWithPeers': DEADLINE_EXCEEDED names the first
// peer still owing bytes, UNAVAILABLE a peer that closed or reset.
absl::Status PipelinedAllReduce(char* data, size_t count, const PipelinedAllReduceArgs& args,
                                std::vector<std::vector<char>>& scratch, WorkTimes* times);

}  // namespace herd
