#include "worker/train/step/step_capture.h"

#include <utility>

namespace herd {

StepCapture::StepCapture(bool requested, int64_t warmup_steps, std::function<void(const char*)> on_fallback,
                         std::function<void(const std::string&)> log)
    : requested_(requested),
      warmup_steps_(warmup_steps),
      on_fallback_(std::move(on_fallback)),
      log_(std::move(log)) {}

void StepCapture::Report(CaptureFallback reason, const std::string& detail) {
  if (on_fallback_) on_fallback_(CaptureFallbackLabel(reason));
  if (log_ && logged_.insert(reason).second) log_(DescribeCaptureFallback(reason) + detail);
}

CaptureFallback StepCapture::StartGeneration(const CaptureEnvironment& env, int64_t generation) {
  if (!requested_) return CaptureFallback::kNone;
  const CaptureFallback reason = CaptureBlocker(env);
  // A capture failure holds for the run: the step is the same in the next generation.
  if (state_.fallback == CaptureFallback::kCaptureFailed) {
    Report(CaptureFallback::kCaptureFailed, "");
    return CaptureFallback::kCaptureFailed;
  }
  const int64_t captures = state_.captures;
  state_ = StepCaptureState{};
  state_.generation = generation;
  state_.captures = captures;
  state_.pending = captures > 0 ? CaptureCause::kGeneration : CaptureCause::kWarm;
  if (reason != CaptureFallback::kNone) {
    state_ = FallBack(state_, reason);
    Report(reason, "");
  }
  return reason;
}

void StepCapture::CaptureFailed(const std::string& error) {
  state_ = FallBack(state_, CaptureFallback::kCaptureFailed);
  Report(CaptureFallback::kCaptureFailed, ": " + error);
}

StepCaptureDecision StepCapture::Next(const StepEvent& event) {
  if (!active()) return StepCaptureDecision{StepAction::kEager, CaptureCause::kNone, state_};
  StepCaptureDecision d = DecideStep(state_, event, warmup_steps_);
  state_ = d.next;
  return d;
}

bool HasFusedStep(v1::OptimizerName optimizer, bool amsgrad) {
  switch (optimizer) {
    case v1::OPTIMIZER_NAME_SGD:
      return true;
    case v1::OPTIMIZER_NAME_ADAM:
    case v1::OPTIMIZER_NAME_ADAMW:
      return !amsgrad;
    default:
      return false;
  }
}

bool StepFreeOfHostSync(int64_t world_size, int64_t micro_batches_per_step, bool collective_forward,
                        bool shard_optimizer) {
  return world_size == 1 && micro_batches_per_step == 1 && !collective_forward && !shard_optimizer;
}

}  // namespace herd
