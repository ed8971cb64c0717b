// The trainer's side of `cuda_graphs`: once per generation, whether its
// steps may be captured (step_capture_policy.h's CaptureBlocker on what the
// trainer knows), and if not, one log line and one count by reason. Per step,
// Next() says eager, capture or replay (DecideStep). A job that did not ask
// for graphs, or that falls back, runs every step eagerly as without it.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "worker/train/step/step_capture_policy.h"
#include "proto/herd.pb.h"

namespace herd {

class StepCapture {
 public:
  // `on_fallback(label)`: a generation runs eagerly for that reason (the
  // metric herd_train_cuda_graph_fallbacks_total{reason}); `log(line)`:
  // where the one line per reason goes.
  StepCapture(bool requested, int64_t warmup_steps, std::function<void(const char*)> on_fallback,
              std::function<void(const std::string&)> log);

  // At a generation's start. Returns the reason it runs eagerly (kNone:
  // it may capture; also kNone when graphs were not asked for).
  CaptureFallback StartGeneration(const CaptureEnvironment& env, int64_t generation);
  // A capture raised: eager from here on (logged and counted).
  void CaptureFailed(const std::string& error);
  // This step's action; always kEager unless the generation may capture.
  StepCaptureDecision Next(const StepEvent& event);

  bool requested() const { return requested_; }
  bool active() const { return requested_ && !state_.fallen_back; }

 private:
  void Report(CaptureFallback reason, const std::string& detail);

  const bool requested_;
  const int64_t warmup_steps_;
  std::function<void(const char*)> on_fallback_;
  std::function<void(const std::string&)> log_;
  std::set<CaptureFallback> logged_;  // one line per reason per process
  StepCaptureState state_;
};

// The optimizers whose update has a fused CUDA kernel (fused_optimizer.h).
bool HasFusedStep(v1::OptimizerName optimizer, bool amsgrad);

// Whether the trainer's step, as the captured path runs it
// (training_step.h, graphed_step.h), reads nothing on the host between
// forward and optimizer: one rank (with more, the gradient all-reduce
// waits for its buckets on the host, so it is neither inside a graph nor
// replayed around one yet), one micro-batch per step (the graph has one
// batch's static inputs), no collective forward (norm: sync_batch) and not
// sync.shard_optimizer (its clipping and shard steps read the host).
bool StepFreeOfHostSync(int64_t world_size, int64_t micro_batches_per_step, bool collective_forward,
                        bool shard_optimizer);

}  // namespace herd
