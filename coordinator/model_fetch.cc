#include "coordinator/model_fetch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/control_chars.h"
#include "common/model_files.h"

namespace herd::coordinator {

absl::StatusOr<ModelFetchPlan> PlanModelFetch(const v1::FetchModelFileRequest& request, const v1::JobInfo& job,
                                              const std::vector<v1::CheckpointInfo>& checkpoints,
                                              const std::vector<v1::WorkerInfo>& workers) {
  ModelFetchPlan plan;
  plan.ask.set_job_id(job.id());
  plan.ask.set_file(request.file());
  plan.workers.assign(job.workers().begin(), job.workers().end());
  if (request.checkpoint_step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint_step: ", request.checkpoint_step(), " is negative"));
  }
  if (request.checkpoint_step() == 0) {
    if (!IsFinalModelFileName(request.file())) {
      return absl::InvalidArgumentError(absl::StrCat("file: '", EscapeControlChars(request.file()),
                                                     "' is not a final model file (", kFinalSafetensorsFile, " or ",
                                                     kFinalModelFile, ")"));
    }
    if (job.final_model().empty()) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " has no final model: it is ",
                                                        v1::JobState_Name(job.state()),
                                                        " and only a job that succeeded has one"));
    }
    plan.what = absl::StrCat(request.file(), " of job ", job.id());
    return plan;
  }
  if (!IsPlainFileName(request.file())) {
    return absl::InvalidArgumentError(
        absl::StrCat("file: '", EscapeControlChars(request.file()), "' is not a file name within a checkpoint"));
  }
  auto checkpoint = std::find_if(checkpoints.begin(), checkpoints.end(),
                                 [&](const v1::CheckpointInfo& c) { return c.step() == request.checkpoint_step(); });
  if (checkpoint == checkpoints.end()) {
    std::vector<std::string> steps;
    for (const v1::CheckpointInfo& c : checkpoints) steps.push_back(absl::StrCat(c.step()));
    return absl::NotFoundError(absl::StrCat("job ", job.id(), " has no recorded checkpoint of step ",
                                            request.checkpoint_step(),
                                            " (recorded: ", steps.empty() ? "none" : absl::StrJoin(steps, ", "), ")"));
  }
  if (!IsCheckpointPathOf(job.id(), checkpoint->path())) {
    return absl::InternalError(absl::StrCat("checkpoint of step ", checkpoint->step(), " has path '",
                                            checkpoint->path(), "', not one of job ", job.id()));
  }
  plan.ask.set_checkpoint_path(checkpoint->path());
  for (const v1::WorkerInfo& worker : workers) {
    if (worker.state() == v1::DEAD) continue;
    if (std::find(plan.workers.begin(), plan.workers.end(), worker.id()) == plan.workers.end()) {
      plan.workers.push_back(worker.id());
    }
  }
  plan.what = absl::StrCat(request.file(), " of job ", job.id(), "'s checkpoint at step ", checkpoint->step());
  return plan;
}

absl::Status NoWorkerHolds(const ModelFetchPlan& plan, const std::vector<std::string>& answers) {
  if (answers.empty())
    return absl::NotFoundError(absl::StrCat("no worker holds ", plan.what, ": the job had no workers"));
  return absl::NotFoundError(
      absl::StrCat("no worker holds ", plan.what, " any more (", absl::StrJoin(answers, "; "), ")"));
}

}  // namespace herd::coordinator
