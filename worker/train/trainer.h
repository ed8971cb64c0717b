// One generation of a job on one trainer: the group. It owns only what a
// membership change replaces (communicators, gradient sync, parameter
// averaging) and trains the job context (worker/train/training_context.h),
// which outlives it: a re-formed generation never reloads data or model.
//
// Run() starts by healing: the ranks pick the newest commit any of them
// holds and its holder broadcasts it (healing.h); with none, the newest
// checkpoint, else rank 0's fresh parameters. It fails with UNAVAILABLE,
// DEADLINE_EXCEEDED or ABORTED when a collective fails and
// FAILED_PRECONDITION when the coordinator fenced the generation: the caller
// then joins the next generation (generation_loop.h).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/train/cluster_client.h"
#include "worker/train/gradient_sync.h"
#include "worker/train/parameter_averaging.h"
#include "worker/train/training_context.h"

namespace herd {

// Where the trained parameters go: every rank writes its own copy, so
// replicas can be compared and any surviving worker holds the result.
constexpr char kFinalModelFile[] = "model-final.pt";

class Trainer {
 public:
  // `client` and `context` must outlive the trainer.
  Trainer(ClusterClient* client, TrainingContext* context, v1::JoinGenerationResponse join);
  ~Trainer();

  absl::Status Run();

 private:
  absl::Status Setup();
  absl::Status CreateCommunicators();
  bool UseSharedMemory() const;
  absl::Status TrainStep();
  absl::Status CommitPoint(bool final);
  absl::Status RunEval();
  absl::Status SaveFinalModel();
  absl::Status SaveCheckpoint();
  absl::Status RestoreFromCheckpoint();
  // Where this generation starts: the newest in-memory commit of any rank,
  // else the newest checkpoint, else rank 0's fresh parameters.
  absl::Status ChooseStartingState();
  absl::Status RestoreFiles(const std::map<std::string, std::string>& files);
  absl::Status Commit();
  // What the coordinator answered the reporter: fenced or cancelled.
  absl::Status CheckCoordinatorVerdict() const;
  int64_t TotalSteps() const;
  bool Done() const;
  void ZeroGrads();
  // Mode average: steps without gradient sync, rounds, and where commits may fall.
  bool LocalStep() const;
  bool AveragingDue() const;
  absl::Status AverageRound();
  bool CommitDue() const;
  void LogSyncTraffic() const;

  ClusterClient* client_;
  TrainingContext& ctx_;
  v1::JoinGenerationResponse join_;
  const v1::JobSpec& spec_;

  // Gloo over CPU buffers: hashes, evaluation sums, healing, replica checks.
  std::unique_ptr<Communicator> comm_;
  // Device cuda: NCCL for gradients and averaged parameters (device buffers).
  std::unique_ptr<Communicator> nccl_;
  // Ranks on one host (CPU): float32 all-reduce through shared memory.
  std::unique_ptr<Communicator> shm_;
  Communicator* data_comm_ = nullptr;  // gradients, averaging: nccl_ on cuda, else shm_ or comm_
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<ParameterAveraging> averaging_;  // mode average only

  int64_t total_steps_ = 0;
  int64_t last_commit_step_ = 0;
  // Mode average: replicas differ between rounds; commits wait for a round.
  int64_t local_steps_since_round_ = 0;
  bool replicas_in_sync_ = true;
};

}  // namespace herd
