#include "coordinator/join_board.h"

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"

namespace herd::coordinator {
namespace {

bool SameGeneration(const FormedAnswer& answer, const JobRecord& job) {
  const v1::JoinGenerationResponse& response = answer.response;
  const Generation& generation = job.generation;
  if (response.generation() != generation.number || response.start_step() != generation.start_step ||
      response.peers_size() != static_cast<int>(generation.members.size())) {
    return false;
  }
  for (int r = 0; r < response.peers_size(); ++r) {
    if (response.peers(r).worker_id() != generation.members[r]) return false;
  }
  return google::protobuf::util::MessageDifferencer::Equals(response.spec(), job.info.spec());
}

std::shared_ptr<const FormedAnswer> BuildAnswer(const ClusterState& state, const JobRecord& job) {
  auto answer = std::make_shared<FormedAnswer>();
  const Generation& generation = job.generation;
  v1::JoinGenerationResponse& response = answer->response;
  response.set_generation(generation.number);
  response.set_world_size(static_cast<int64_t>(generation.members.size()));
  response.mutable_peers()->Reserve(static_cast<int>(generation.members.size()));
  for (size_t r = 0; r < generation.members.size(); ++r) {
    const std::string& member = generation.members[r];
    v1::Peer* peer = response.add_peers();
    peer->set_rank(static_cast<int64_t>(r));
    peer->set_worker_id(member);
    auto worker = state.workers.find(member);
    if (worker != state.workers.end()) {
      peer->set_address(worker->second.address);
      peer->mutable_labels()->insert(worker->second.labels.begin(), worker->second.labels.end());
    }
    answer->rank_of.emplace(member, static_cast<int64_t>(r));
  }
  *response.mutable_spec() = job.info.spec();
  response.set_seed(job.info.spec().seed());
  response.set_start_step(generation.start_step);
  response.set_kv_prefix(absl::StrCat(job.info.id(), "/", generation.number, "/"));
  return answer;
}

}  // namespace

JoinView JoinViewOf(const ClusterState& state, const JobRecord& job, const JoinView* previous,
                    bool members_changed) {
  JoinView view;
  view.state = job.info.state();
  view.reason = job.info.reason();
  view.generation = job.generation.number;
  view.formed = job.generation.formed;
  if (const v1::CheckpointInfo* checkpoint = NewestCheckpoint(state, job.info.id())) {
    view.checkpoint_path = checkpoint->path();
  }
  if (view.state != v1::RUNNING || !view.formed) return view;
  if (previous != nullptr && previous->answer != nullptr && !members_changed &&
      SameGeneration(*previous->answer, job)) {
    view.answer = previous->answer;
  } else {
    view.answer = BuildAnswer(state, job);
  }
  return view;
}

void JoinBoard::Publish(const std::string& job_id, JoinView view) {
  absl::MutexLock lock(&mu_);
  views_[job_id] = std::move(view);
  changed_.SignalAll();
}

void JoinBoard::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  changed_.SignalAll();
}

absl::StatusOr<v1::JoinGenerationResponse> JoinBoard::Await(const std::string& job_id, const std::string& worker_id,
                                                            int64_t after_generation, absl::Time deadline,
                                                            int64_t wait_ms, absl::Duration cancel_poll,
                                                            const std::function<bool()>& cancelled) {
  std::shared_ptr<const FormedAnswer> answer;
  std::string checkpoint_path;
  {
    absl::MutexLock lock(&mu_);
    while (true) {
      auto it = views_.find(job_id);
      if (it == views_.end()) return absl::NotFoundError(absl::StrCat("job ", job_id, " not found"));
      const JoinView& view = it->second;
      if (IsFinal(view.state)) {
        return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ", v1::JobState_Name(view.state)));
      }
      // A worker that is not a member waits too: one left out of a
      // generation (its lease lapsed) is re-admitted into a later one while
      // its trainer keeps the job context (see HeldForJob).
      if (view.answer != nullptr && view.generation > after_generation && view.answer->rank_of.count(worker_id)) {
        answer = view.answer;
        checkpoint_path = view.checkpoint_path;
        break;
      }
      if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        if (view.state == v1::RUNNING && view.formed) {
          return absl::DeadlineExceededError(absl::StrCat("worker ", worker_id, " is not a member of job ", job_id,
                                                          " generation ", view.generation, " (waited ", wait_ms,
                                                          " ms to be admitted)"));
        }
        return absl::DeadlineExceededError(absl::StrCat("job ", job_id, " is still ",
                                                        v1::JobState_Name(view.state), " (", view.reason,
                                                        ") after waiting ", wait_ms, " ms"));
      }
      if (cancelled && cancelled()) return absl::CancelledError("the caller cancelled the join");
      changed_.WaitWithDeadline(&mu_, std::min(deadline, now + cancel_poll));
    }
  }
  // The shared answer is immutable: each rank copies it without the
  // board's lock, a few at a time. A thousand ranks copying (and then
  // serializing) a thousand peers each all at once took every core and
  // hundreds of MiB, and heartbeats waited for the CPU.
  {
    absl::MutexLock lock(&copy_mu_);
    auto slot_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(copy_mu_) { return copying_ < max_copying_; };
    copy_mu_.Await(absl::Condition(&slot_free));
    ++copying_;
  }
  v1::JoinGenerationResponse response = answer->response;
  {
    absl::MutexLock lock(&copy_mu_);
    --copying_;
  }
  response.set_rank(answer->rank_of.at(worker_id));
  if (!checkpoint_path.empty()) response.set_checkpoint_path(checkpoint_path);
  return response;
}

}  // namespace herd::coordinator
