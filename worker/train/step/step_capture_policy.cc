#include "worker/train/step/step_capture_policy.h"

namespace herd {

const char* CaptureFallbackLabel(CaptureFallback reason) {
  switch (reason) {
    case CaptureFallback::kNone: return "none";
    case CaptureFallback::kCpuDevice: return "cpu_device";
    case CaptureFallback::kNotBuilt: return "not_built";
    case CaptureFallback::kTorchScriptModel: return "torchscript_model";
    case CaptureFallback::kOptimizerNotFused: return "optimizer_not_fused";
    case CaptureFallback::kNonNcclBackend: return "non_nccl_backend";
    case CaptureFallback::kLocalSteps: return "local_steps";
    case CaptureFallback::kSkipStep: return "skip_step";
    case CaptureFallback::kStepHostSync: return "step_host_sync";
    case CaptureFallback::kCaptureFailed: return "capture_failed";
  }
  return "unknown";
}

std::string DescribeCaptureFallback(CaptureFallback reason) {
  const std::string head = std::string("cuda_graphs: running eagerly (") + CaptureFallbackLabel(reason) + "): ";
  switch (reason) {
    case CaptureFallback::kNone: return "cuda_graphs: capturable";
    case CaptureFallback::kCpuDevice: return head + "the device is cpu; CUDA graphs need device: cuda";
    case CaptureFallback::kNotBuilt:
      return head + "this trainer was built against a LibTorch without CUDA (scripts/cuda_build.sh builds one with it)";
    case CaptureFallback::kTorchScriptModel:
      return head + "a TorchScript model may read the host or branch on data inside forward; use a built-in model";
    case CaptureFallback::kOptimizerNotFused:
      return head + "only the fused optimizer's step is free of host reads; use a fused optimizer";
    case CaptureFallback::kNonNcclBackend:
      return head + "world > 1 with a host all-reduce (not NCCL) cannot be captured";
    case CaptureFallback::kLocalSteps:
      return head + "sync.mode average reads the host between local steps and rounds";
    case CaptureFallback::kSkipStep:
      return head + "on_nonfinite: skip_step decides on the host every step; use fail or warn";
    case CaptureFallback::kStepHostSync:
      return head + "only a one-rank step of one micro-batch with the plain all-reduce update is captured; here the "
                    "step reads the host between forward and optimizer (world > 1: the all-reduce waits for its "
                    "buckets on the host; or several micro-batches per step, a collective forward (norm: sync_batch), "
                    "sync.shard_optimizer)";
    case CaptureFallback::kCaptureFailed:
      return head + "capture raised; the step is not capturable as written";
  }
  return head;
}

CaptureFallback CaptureBlocker(const CaptureEnvironment& env) {
  if (!env.cuda_device) return CaptureFallback::kCpuDevice;
  if (!env.graphs_built) return CaptureFallback::kNotBuilt;
  if (env.torchscript_model) return CaptureFallback::kTorchScriptModel;
  if (!env.fused_optimizer) return CaptureFallback::kOptimizerNotFused;
  if (env.world_size > 1 && !env.nccl_backend) return CaptureFallback::kNonNcclBackend;
  if (env.local_steps) return CaptureFallback::kLocalSteps;
  if (env.skip_step) return CaptureFallback::kSkipStep;
  if (!env.step_free_of_host_sync) return CaptureFallback::kStepHostSync;
  return CaptureFallback::kNone;
}

const char* CaptureCauseLabel(CaptureCause cause) {
  switch (cause) {
    case CaptureCause::kNone: return "none";
    case CaptureCause::kWarm: return "warm";
    case CaptureCause::kGeneration: return "generation";
    case CaptureCause::kReplan: return "replan";
    case CaptureCause::kShape: return "shape";
  }
  return "unknown";
}

namespace {

StepCaptureDecision Eager(StepCaptureState next) {
  ++next.warm_steps;
  return {StepAction::kEager, CaptureCause::kNone, next};
}

StepCaptureDecision Capture(StepCaptureState next, const StepEvent& event, CaptureCause cause) {
  next.captured = true;
  next.generation = event.generation;
  next.plan = event.plan;
  next.rows = event.rows;
  ++next.captures;
  return {StepAction::kCapture, cause, next};
}

}  // namespace

StepCaptureDecision DecideStep(const StepCaptureState& state, const StepEvent& event, int64_t warmup_steps) {
  StepCaptureState next = state;
  if (state.fallen_back) return {StepAction::kEager, CaptureCause::kNone, next};
  const bool new_generation = event.generation != state.generation;
  if (new_generation) {
    // The old graph holds the old communicators' buffers: warm up again.
    next.captured = false;
    next.generation = event.generation;
    next.warm_steps = 0;
    next.pending = state.captures > 0 ? CaptureCause::kGeneration : CaptureCause::kWarm;
  }
  // A short last batch never starts a capture, warm or not.
  const bool short_last = event.epoch_last && next.rows >= 0 && event.rows < next.rows;
  if (!next.captured) {
    if (next.warm_steps < warmup_steps || short_last || event.rows <= 0) return Eager(next);
    const CaptureCause cause = next.pending;
    next.pending = CaptureCause::kWarm;
    return Capture(next, event, cause);
  }
  if (event.plan != next.plan) return Capture(next, event, CaptureCause::kReplan);
  if (event.rows != next.rows) {
    if (short_last || event.rows <= 0) return {StepAction::kEager, CaptureCause::kNone, next};
    return Capture(next, event, CaptureCause::kShape);
  }
  return {StepAction::kReplay, CaptureCause::kNone, next};
}

StepCaptureState FallBack(const StepCaptureState& state, CaptureFallback reason) {
  StepCaptureState next = state;
  next.fallen_back = true;
  next.fallback = reason;
  next.captured = false;
  return next;
}

}  // namespace herd
