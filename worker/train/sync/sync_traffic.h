// What a trainer spent on synchronization, in either sync mode, as plain
// fields: the trainer logs them and the metrics exporter reads them. Plain
// C++ (no LibTorch) so readers compile fast.
#pragma once

#include <cstdint>
#include <string>

#include "worker/train/sync/round_timeline.h"

namespace herd {

struct SyncTraffic {
  // Bytes this rank handed to all-reduce (buffer sizes in the wire format),
  // counted the same way for gradient buckets and parameter averaging so the
  // two modes compare directly. With sync.shard_optimizer the gradient
  // reduce-scatter and the parameter all-gather each count half their
  // buffer: together what an all-reduce of it counts.
  int64_t wire_bytes = 0;
  int64_t samples = 0;           // samples this rank trained on
  double train_seconds = 0;      // wall time in training steps (evaluation excluded)
  int64_t allreduce_steps = 0;   // steps whose gradients were all-reduced
  // Of train_seconds, how long synchronization held the steps up (slower
  // peers included): the gradient all-reduce after backward, and averaging
  // rounds' blocking parts. What synchronization cost this rank.
  double allreduce_wait_seconds = 0;
  int64_t local_steps = 0;       // steps without gradient sync (mode average)
  int64_t averaging_rounds = 0;
  double last_round_seconds = 0;           // the last round's all-reduce + update
  double last_round_interval_seconds = 0;  // wall time between the last two rounds
  RoundTotals round_phases;                // where the rounds' time went (round_timeline.h)

  double BytesPerSample() const { return samples > 0 ? static_cast<double>(wire_bytes) / samples : 0; }
  double SamplesPerSecond() const { return train_seconds > 0 ? samples / train_seconds : 0; }
};

// What the sync is doing now, for progress reports (herd status) and metrics.
struct SyncStatus {
  int64_t overlap_steps = 0;  // tau now; 0: rounds merge at once (or mode allreduce)
  bool overlap_auto = false;
  double round_seconds = 0;   // auto: a round's in-flight time, as tau was last chosen
  double step_seconds = 0;    // auto: a local step's time, likewise
  std::string round_shape;    // int8 rounds: "all-reduce" or "gather" (round_shape.h); "" without int8
  std::string warning;        // e.g. the link needs more steps per round than sync.every
};

}  // namespace herd
