#include "worker/train/testing/in_process_coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace herd {

class InProcessCoordinator::WorkerLink : public CoordinatorLink {
 public:
  WorkerLink(InProcessCoordinator* coordinator, std::string worker_id)
      : coordinator_(coordinator), worker_id_(std::move(worker_id)) {}

  const std::string& job_id() const override { return coordinator_->job_id_; }
  const std::string& worker_id() const override { return worker_id_; }

  // A rank in the current generation asks again only after it failed, so
  // it waits for the next one anyway: `after_generation` changes nothing.
  // Its trainers are never asked to re-form, so `at_boundary` never comes.
  absl::StatusOr<v1::JoinGenerationResponse> JoinGeneration(std::chrono::milliseconds wait,
                                                            int64_t /*after_generation*/ = 0,
                                                            bool /*at_boundary*/ = false) override {
    return coordinator_->Join(worker_id_, wait);
  }

  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& request) override {
    if (auto s = coordinator_->CheckCurrent(request.generation()); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(coordinator_->mu_);
    coordinator_->reports_.push_back(request);
    return v1::ReportProgressResponse();
  }

  absl::StatusOr<v1::CommitCheckpointResponse> CommitCheckpoint(const v1::CommitCheckpointRequest& request) override {
    if (auto s = coordinator_->CheckCurrent(request.generation()); !s.ok()) return s;
    return v1::CommitCheckpointResponse();
  }

  absl::Status ReportFailure(const v1::ReportFailureRequest& request) override {
    std::lock_guard<std::mutex> lock(coordinator_->mu_);
    if (request.generation() != coordinator_->generation_ || coordinator_->forming_) {
      return absl::FailedPreconditionError(absl::StrCat("generation ", request.generation(), " is already replaced"));
    }
    coordinator_->failures_.push_back(request);
    coordinator_->StartNextLocked();
    return absl::OkStatus();
  }

  std::shared_ptr<RendezvousStore> KvStore(int64_t generation) override { return coordinator_->Store(generation); }

 private:
  InProcessCoordinator* coordinator_;
  std::string worker_id_;
};

InProcessCoordinator::InProcessCoordinator(std::string job_id, v1::JobSpec spec, uint64_t seed)
    : job_id_(std::move(job_id)), spec_(std::move(spec)), seed_(seed) {}

void InProcessCoordinator::SetMembers(std::vector<std::string> worker_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  members_ = std::move(worker_ids);
  FormIfCompleteLocked();
}

void InProcessCoordinator::SetLabels(const std::string& worker_id, std::map<std::string, std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  labels_[worker_id] = std::move(labels);
}

void InProcessCoordinator::Fence() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!forming_) StartNextLocked();
}

void InProcessCoordinator::SetCheckpoint(std::string relative_path, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  checkpoint_path_ = std::move(relative_path);
  checkpoint_step_ = step;
}

std::unique_ptr<CoordinatorLink> InProcessCoordinator::Link(const std::string& worker_id) {
  return std::make_unique<WorkerLink>(this, worker_id);
}

int64_t InProcessCoordinator::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

std::vector<v1::ReportProgressRequest> InProcessCoordinator::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}

std::vector<v1::ReportFailureRequest> InProcessCoordinator::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

void InProcessCoordinator::StartNextLocked() {
  forming_ = true;
  joined_.clear();
  changed_.notify_all();
}

// The pending generation forms once every member asked to join it.
void InProcessCoordinator::FormIfCompleteLocked() {
  if (!forming_ || members_.empty()) return;
  for (const auto& id : members_) {
    auto it = joined_.find(id);
    if (it == joined_.end() || it->second != generation_ + 1) return;
  }
  ++generation_;
  formed_members_ = members_;
  forming_ = false;
  changed_.notify_all();
}

absl::StatusOr<v1::JoinGenerationResponse> InProcessCoordinator::Join(const std::string& worker_id,
                                                                      std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (true) {
    auto rank = std::find(formed_members_.begin(), formed_members_.end(), worker_id);
    // A member of the current generation that has not trained in it yet
    // (or asks again) gets its place; anyone else waits for the next one.
    if (!forming_ && rank != formed_members_.end() && joined_.count(worker_id) != 0) {
      v1::JoinGenerationResponse response;
      response.set_generation(generation_);
      response.set_rank(rank - formed_members_.begin());
      response.set_world_size(static_cast<int64_t>(formed_members_.size()));
      for (size_t i = 0; i < formed_members_.size(); ++i) {
        auto* peer = response.add_peers();
        peer->set_rank(static_cast<int64_t>(i));
        peer->set_worker_id(formed_members_[i]);
        peer->set_address("127.0.0.1");
        if (auto it = labels_.find(formed_members_[i]); it != labels_.end()) {
          peer->mutable_labels()->insert(it->second.begin(), it->second.end());
        }
      }
      *response.mutable_spec() = spec_;
      response.set_seed(seed_);
      response.set_checkpoint_path(checkpoint_path_);
      response.set_start_step(checkpoint_step_);
      return response;
    }
    if (forming_) {
      joined_[worker_id] = generation_ + 1;
      FormIfCompleteLocked();
      if (!forming_) continue;
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("worker ", worker_id, " is not a member of generation ", generation_ + 1, " yet"));
    }
  }
}

absl::Status InProcessCoordinator::CheckCurrent(int64_t generation) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (generation != generation_ || forming_) {
    return absl::FailedPreconditionError(absl::StrCat("generation ", generation, " was superseded"));
  }
  return absl::OkStatus();
}

std::shared_ptr<RendezvousStore> InProcessCoordinator::Store(int64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& store = stores_[generation];
  if (store == nullptr) store = std::make_shared<InMemoryStore>();
  return store;
}

}  // namespace herd
