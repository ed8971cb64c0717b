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
#include "worker/train/sampler.h"

namespace herd {

struct TrainerOptions {
  std::string work_dir;
  std::string device = "cpu";
  int gpu = -1;
  std::chrono::milliseconds collective_timeout{30000};
};

// Where the trained parameters go: every rank writes its own copy, so
// replicas can be compared and any surviving worker holds the result.
constexpr char kFinalModelFile[] = "model-final.pt";

class Trainer {
 public:
  Trainer(ClusterClient* client, v1::JoinGenerationResponse join, TrainerOptions options);
  ~Trainer();

  absl::Status Run();

 private:
  absl::Status Setup();
  absl::Status TrainStep();
  absl::Status CommitPoint(bool final);
  absl::Status RunEval();
  absl::Status SaveFinalModel();
  bool Done() const;
  void ZeroGrads();

  ClusterClient* client_;
  v1::JoinGenerationResponse join_;
  const v1::JobSpec& spec_;
  TrainerOptions options_;
  torch::Device device_;

  std::unique_ptr<Dataset> train_;
  std::unique_ptr<Dataset> eval_;
  std::unique_ptr<Model> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<GradientSync> sync_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<EpochSampler> sampler_;

  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t position_ = 0;  // samples of the current epoch already consumed
  int64_t total_steps_ = 0;

  // Since the last commit point, for progress reports.
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  int64_t samples_since_report_ = 0;
  std::chrono::steady_clock::time_point last_report_time_;
  double last_loss_ = 0;
  std::map<std::string, double> eval_metrics_;
};

}  // namespace herd
