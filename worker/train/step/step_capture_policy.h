// When a training step may run as a captured CUDA graph, and when the graph
// must be captured again. Pure decisions, no LibTorch: the trainer feeds
// what it knows (its environment once, then one event per step) and does
// what the answer says; step_graph.h does the capture itself.
#pragma once

#include <cstdint>
#include <string>

namespace herd {

// Why a job that asked for `cuda_graphs` runs its steps eagerly. The label
// is the `reason` of herd_train_cuda_graph_fallbacks_total.
enum class CaptureFallback {
  kNone,              // capturable
  kCpuDevice,         // graphs are a CUDA feature
  kNotBuilt,          // this build's LibTorch has no CUDA
  kTorchScriptModel,  // a scripted forward may sync with the host or branch on data
  kOptimizerNotFused, // only the fused optimizer's step is free of host reads
  kNonNcclBackend,    // world > 1 over Gloo/TCP: the all-reduce runs on the host
  kLocalSteps,        // parameter averaging: rounds read the host between steps
  kSkipStep,          // on_nonfinite skip_step decides on the host, per step
  kStepHostSync,      // the trainer's step still reads the host (a captured step is not wired in yet)
  kCaptureFailed,     // capture raised: the step is not capturable as written
};

const char* CaptureFallbackLabel(CaptureFallback reason);
// One line for the log: what blocks capture and what to change.
std::string DescribeCaptureFallback(CaptureFallback reason);

struct CaptureEnvironment {
  bool cuda_device = false;
  bool graphs_built = false;  // StepGraphsBuilt()
  bool torchscript_model = false;
  bool fused_optimizer = false;
  int64_t world_size = 1;
  bool nccl_backend = false;
  bool local_steps = false;
  bool skip_step = false;
  bool step_free_of_host_sync = false;
};

// The first reason, in the order above, that rules capture out; kNone if none.
CaptureFallback CaptureBlocker(const CaptureEnvironment& env);

enum class StepAction {
  kEager,    // run the step eagerly, without a graph
  kCapture,  // run the step under capture, then replay the new graph
  kReplay,   // copy the batch into the static inputs and replay
};

// Why a graph is (re)captured; the log line's word.
enum class CaptureCause { kNone, kWarm, kGeneration, kReplan, kShape };
const char* CaptureCauseLabel(CaptureCause cause);

struct StepCaptureState {
  bool fallen_back = false;  // eager for the rest of the run
  CaptureFallback fallback = CaptureFallback::kNone;
  int64_t warm_steps = 0;    // eager steps since the last reset
  bool captured = false;
  int64_t generation = -1;   // of the captured graph (or of the warmup)
  int64_t plan = -1;         // share plan version of the captured graph
  int64_t rows = -1;         // batch rows the graph was captured with
  int64_t captures = 0;
  CaptureCause pending = CaptureCause::kWarm;  // the cause the next capture after warmup logs
};

struct StepEvent {
  int64_t generation = 0;
  int64_t plan = 0;       // bumped on every share re-plan
  int64_t rows = 0;       // this rank's rows this step
  bool epoch_last = false;  // the epoch's last step (its batch may be short)
};

struct StepCaptureDecision {
  StepAction action = StepAction::kEager;
  CaptureCause cause = CaptureCause::kNone;
  StepCaptureState next;
};

// The decision for one step. Rules:
// - fallen back: eager, always;
// - a new generation (new communicators, maybe new world size): warm up
//   again from zero, then capture (NCCL and the allocator need warm steps);
// - before `warmup_steps` eager steps: eager;
// - a share re-plan or a persistent change of rows: capture again;
// - an epoch's short last batch: one eager step, the graph is kept. Not
//   dropped (every sample is trained, as without graphs) and not captured
//   (it would cost two captures per epoch, for one step each);
// - otherwise: replay.
StepCaptureDecision DecideStep(const StepCaptureState& state, const StepEvent& event, int64_t warmup_steps);

// After a capture raised: eager for the rest of the run.
StepCaptureState FallBack(const StepCaptureState& state, CaptureFallback reason);

}  // namespace herd
