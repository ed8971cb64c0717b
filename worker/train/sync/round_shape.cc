#include "worker/train/sync/round_shape.h"

namespace herd {

const char* RoundShapeName(RoundShape shape) {
  return shape == RoundShape::kGather ? "gather" : "all-reduce";
}

RoundShape InitialRoundShape(int world) { return world == 2 ? RoundShape::kGather : RoundShape::kAllReduce; }

RoundShapeState NextRoundShape(const RoundShapeState& state, double round_seconds, bool beyond_bound,
                               bool full_window) {
  RoundShapeState next = state;
  if (state.settled) return next;
  if (state.shape == RoundShape::kAllReduce) {
    if (beyond_bound) {
      next.shape = RoundShape::kGather;
      next.all_reduce_round_seconds = round_seconds;
    }
    return next;
  }
  // Gather: judged only against an all-reduce measurement (a two-rank job
  // starts with gather, which sends the same bytes in fewer hops).
  if (full_window && state.all_reduce_round_seconds > 0 && round_seconds > state.all_reduce_round_seconds) {
    next.shape = RoundShape::kAllReduce;
    next.settled = true;
  }
  return next;
}

}  // namespace herd
