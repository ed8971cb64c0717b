// How an int8 averaging round moves its bytes, and when to change it.
//
//   all-reduce: the ranks first agree on shared chunk scales (a small
//     all-gather, overlapped with training), then sum their codes with a
//     pipelined reduce-scatter and all-gather: three dependent hops, and
//     each rank sends about 2 (N-1)/N of the fragment's codes.
//   gather: each rank codes its pseudo-gradient with its own chunk scales
//     (all 254 levels: no headroom for the sum is needed) and all-gathers
//     codes and scales; every rank decodes and adds the N contributions in
//     rank order, so all get the same bits. One hop, and each rank sends
//     N-1 times the fragment's codes: the same bytes at N = 2, 1.5x at 3,
//     2x at 4.
// On a long link where the steps are short, the hops are what a round
// costs, and gather can hide a round that all-reduce cannot; where the link
// is busy already, its extra bytes make the round slower. So the choice is
// made from rounds measured: a job starts with all-reduce rounds (two
// ranks: gather, which costs no more bytes); when even tau = sync.every
// cannot hide them (the overlap controller's beyond_bound), it tries
// gather, and keeps it unless its rounds turn out slower than the
// all-reduce rounds were, in which case it goes back for the rest of the
// generation. Gather is judged on a full window of its own rounds (the
// measurements' median), not on the first ones, which still share the link
// with the backlog of the all-reduce rounds before them. A pure function of shared measurements: every rank switches
// at the same round.
#pragma once

#include <cstdint>

namespace herd {

enum class RoundShape { kAllReduce, kGather };

const char* RoundShapeName(RoundShape shape);

// The shape a generation's first rounds use.
RoundShape InitialRoundShape(int world);

struct RoundShapeState {
  RoundShape shape = RoundShape::kAllReduce;
  // The in-flight time of the all-reduce rounds when gather was tried
  // (0: not tried yet).
  double all_reduce_round_seconds = 0;
  bool settled = false;  // gather was tried and lost: all-reduce from here on
};

// After a decision of the overlap controller on rounds of `state.shape`
// taking `round_seconds` in flight; `beyond_bound`: even tau = every cannot
// hide them; `full_window`: every rank's measurement covers a full window
// of rounds of this shape.
RoundShapeState NextRoundShape(const RoundShapeState& state, double round_seconds, bool beyond_bound,
                               bool full_window);

}  // namespace herd
