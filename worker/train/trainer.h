// One trainer process's life for one generation of a job: build data, model
// and communicator, keep replicas identical, run synchronized steps, evaluate,
// report progress, and leave the trained parameters in the work dir.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/data/dataset.h"
#include "worker/models/model.h"
#include "worker/train/cluster_client.h"
#include "worker/train/gradient_sync.h"
#include "worker/train/healing.h"
#include "worker/train/parameter_averaging.h"
#include "worker/train/sample_ledger.h"
#include "worker/train/state_snapshot.h"
#include "worker/train/sampler.h"
#include "worker/train/sync_traffic.h"
#include "worker/train/trainer_metrics.h"

namespace herd {

struct TrainerOptions {
  std::string work_dir;
  std::string device = "cpu";
  int gpu = -1;
  // 0: the job spec's collective_timeout_seconds.
  std::chrono::milliseconds collective_timeout{0};
  // Root of the checkpoint storage (shared by all workers of a cluster).
  std::string checkpoint_root;
};

// Where the trained parameters go: every rank writes its own copy, so
// replicas can be compared and any surviving worker holds the result.
constexpr char kFinalModelFile[] = "model-final.pt";

// Runs one generation. A trainer process builds one Trainer per generation
// it joins; what outlives a generation is `committed` (the last commit held in
// memory, updated at every commit point), the metrics and the ledger.
//
// Run() fails with UNAVAILABLE, DEADLINE_EXCEEDED or ABORTED when a
// collective fails and FAILED_PRECONDITION when the coordinator fenced the
// generation: the caller then joins the next generation, whose ranks heal
// from the newest commit any of them holds (see healing.h).
class Trainer {
 public:
  // `metrics`, `committed` and `ledger` (each optional) must outlive the trainer.
  Trainer(ClusterClient* client, v1::JoinGenerationResponse join, TrainerOptions options,
          TrainerMetrics* metrics = nullptr, CommittedState* committed = nullptr, SampleLedger* ledger = nullptr);
  ~Trainer();

  absl::Status Run();

  // Synchronization spent so far (bytes, samples, averaging rounds).
  const SyncTraffic& sync_traffic() const { return traffic_; }

 private:
  absl::Status Setup();
  absl::Status CheckDevice() const;
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
  TrainerMetrics* metrics_;
  CommittedState* committed_;
  SampleLedger* ledger_;
  v1::JoinGenerationResponse join_;
  const v1::JobSpec& spec_;
  TrainerOptions options_;
  torch::Device device_;

  std::unique_ptr<Dataset> train_;
  std::unique_ptr<Dataset> eval_;
  std::unique_ptr<Model> model_;
  std::vector<torch::Tensor> params_;
  // Gloo over CPU buffers: hashes, evaluation sums, healing, replica checks.
  std::unique_ptr<Communicator> comm_;
  // Device cuda: NCCL for gradients and averaged parameters (device buffers).
  std::unique_ptr<Communicator> nccl_;
  // Ranks on one host (CPU): float32 all-reduce through shared memory.
  std::unique_ptr<Communicator> shm_;
  Communicator* data_comm_ = nullptr;  // gradients, averaging: nccl_ on cuda, else shm_ or comm_
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<ParameterAveraging> averaging_;  // mode average only
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<EpochSampler> sampler_;

  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;  // samples of the current epoch already consumed
  int64_t total_steps_ = 0;
  int64_t last_commit_step_ = 0;
  // Mode average: replicas differ between rounds; commits wait for a round.
  int64_t local_steps_since_round_ = 0;
  bool replicas_in_sync_ = true;
  SyncTraffic traffic_;

  // Since the last commit point, for progress reports.
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  int64_t samples_since_report_ = 0;
  std::chrono::steady_clock::time_point last_report_time_;
  double last_loss_ = 0;
  double samples_per_second_ = 0;
  int64_t last_checkpoint_step_ = -1;
  std::map<std::string, double> eval_metrics_;
};

}  // namespace herd
