// What `herd fetch` asks of which workers: a pure function of the job, its
// recorded checkpoints and the workers, so the choice is tested without
// sockets. The file itself travels over the log relay (see LogRelay).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

struct ModelFetchPlan {
  v1::LogRequest ask;                // what each worker is asked to send
  std::vector<std::string> workers;  // whom to ask, in order, until one sends it
  std::string what;                  // "model-final.pt of job J", for messages
};

// The final model comes from a member of the job's last generation (every
// rank wrote it into its job dir); a checkpoint from those members first,
// then any live worker (checkpoint roots may be shared storage). Refuses
// (INVALID_ARGUMENT) a file name that is not one of the final model's or
// would leave the checkpoint folder, FAILED_PRECONDITION when the job has
// recorded no final model yet, NOT_FOUND for a step with no recorded
// checkpoint.
absl::StatusOr<ModelFetchPlan> PlanModelFetch(const v1::FetchModelFileRequest& request, const v1::JobInfo& job,
                                              const std::vector<v1::CheckpointInfo>& checkpoints,
                                              const std::vector<v1::WorkerInfo>& workers);

// The NOT_FOUND a fetch ends with when no worker sent the file: names the
// job, the file and what each worker answered (each answer names its worker).
absl::Status NoWorkerHolds(const ModelFetchPlan& plan, const std::vector<std::string>& answers);

}  // namespace herd::coordinator
