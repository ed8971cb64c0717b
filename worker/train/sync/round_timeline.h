// Where one averaging round's time went, built from what the round saw:
// the caller's own work (launch, merge), each collective's times on the
// communicator (queued, started, first hop, finished: WorkTimes), and how
// long the caller blocked waiting for them. Pure: the times come in, the
// phases come out, so the arithmetic is tested on its own.
//
// A round's phases, in the order they happen:
//   launch          the caller computes the pseudo-gradient and issues the
//                   round (int8: the chunk-scale all-gather);
//   scales          int8: the scale all-gather, from its start to its end;
//   queued          the data all-reduces waiting behind earlier ops (the
//                   scale exchange, another fragment's round);
//   reduce-scatter  from the first data all-reduce's start to the end of
//                   the last one's first hop;
//   all-gather      from there to the last one's end;
//   merge           the caller applies the mean (outer step, local steps).
// in_flight is the launch to the end of the network work: the time a
// round needs the link for, which overlap_steps must cover. blocked is the
// caller's wait for the network (in Advance and Finish); wire time is the
// rest of in_flight, hidden behind training when blocked is 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/comm/communicator.h"
#include "worker/train/sync/round_shape.h"

namespace herd {

struct RoundTimeline {
  double launch_seconds = 0;
  double scales_seconds = 0;
  double queued_seconds = 0;
  double reduce_scatter_seconds = 0;
  double all_gather_seconds = 0;
  double merge_seconds = 0;
  double in_flight_seconds = 0;
  double blocked_seconds = 0;
  // The data plane as the round's first data all-reduce started: the
  // smallest TCP window over peers and the largest RTT (0: not TCP).
  int64_t window_bytes = 0;
  double rtt_seconds = 0;
  // Gather rounds have one hop: it shows as reduce-scatter, and all-gather
  // is 0 (round_shape.h).
  RoundShape shape = RoundShape::kAllReduce;
};

struct RoundEvents {
  using Time = WorkTimes::Time;
  Time launch_start;
  Time launch_end;
  bool has_scales = false;
  WorkTimes scales;
  std::vector<WorkTimes> data;  // one per bucket, issue order
  double blocked_seconds = 0;   // summed over the caller's waits
  Time merge_start;
  Time merge_end;
};

RoundTimeline BuildRoundTimeline(const RoundEvents& events);

// The round's phases accumulated over many rounds (the process's life):
// what the averaging summary line and the metrics show.
struct RoundTotals {
  int64_t rounds = 0;
  RoundTimeline sum;  // each field summed (window and rtt: the last round's)
  void Add(const RoundTimeline& round);
  // "launch 0.002 s, scales 0.10 s, queued 0.00 s, reduce-scatter 0.31 s,
  // all-gather 0.12 s, merge 0.003 s per round; in flight 0.55 s, blocked
  // 0.01 s; window 64 KiB, rtt 201 ms" (means per round).
  std::string Describe() const;
};

}  // namespace herd
