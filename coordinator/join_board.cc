#include "coordinator/join_board.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>

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
  answer->serialized = response.SerializeAsString();
  return answer;
}

}  // namespace

std::string JoinAnswer::OwnFields() const {
  v1::JoinGenerationResponse own;
  own.set_rank(rank);
  if (!checkpoint_path.empty()) own.set_checkpoint_path(checkpoint_path);
  return own.SerializeAsString();
}

v1::JoinGenerationResponse JoinAnswer::Message() const {
  v1::JoinGenerationResponse response = shared->response;
  response.set_rank(rank);
  if (!checkpoint_path.empty()) response.set_checkpoint_path(checkpoint_path);
  return response;
}

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

namespace {

// What a wait gets from its job's view now: an error, its answer, or
// neither (it waits on).
struct Verdict {
  absl::Status error;
  std::shared_ptr<const FormedAnswer> answer;
  std::string checkpoint_path;
  bool settled() const { return !error.ok() || answer != nullptr; }
};

Verdict Judge(const JoinView* view, const JoinBoard::JoinWait& wait) {
  Verdict verdict;
  if (view == nullptr) {
    verdict.error = absl::NotFoundError(absl::StrCat("job ", wait.job_id, " not found"));
  } else if (IsFinal(view->state)) {
    verdict.error =
        absl::FailedPreconditionError(absl::StrCat("job ", wait.job_id, " is ", v1::JobState_Name(view->state)));
  } else if (view->answer != nullptr && view->generation > wait.after_generation &&
             view->answer->rank_of.count(wait.worker_id)) {
    // A worker that is not a member waits too: one left out of a
    // generation (its lease lapsed) is re-admitted into a later one while
    // its trainer keeps the job context (see HeldForJob).
    verdict.answer = view->answer;
    verdict.checkpoint_path = view->checkpoint_path;
  }
  return verdict;
}

// DEADLINE_EXCEEDED naming what the wait waited for.
absl::Status DeadlineError(const JoinView& view, const JoinBoard::JoinWait& wait) {
  if (view.state == v1::RUNNING && view.formed) {
    return absl::DeadlineExceededError(absl::StrCat("worker ", wait.worker_id, " is not a member of job ",
                                                    wait.job_id, " generation ", view.generation, " (waited ",
                                                    wait.wait_ms, " ms to be admitted)"));
  }
  return absl::DeadlineExceededError(absl::StrCat("job ", wait.job_id, " is still ", v1::JobState_Name(view.state),
                                                  " (", view.reason, ") after waiting ", wait.wait_ms, " ms"));
}

void Deliver(std::vector<std::pair<JoinBoard::Done, absl::Status>>& failed) {
  for (auto& [done, status] : failed) done(std::move(status));
}

}  // namespace

JoinBoard::JoinBoard(int answer_threads, const Clock* clock)
    : deadlines_([this](std::vector<WaitId> due) { Expire(due); }, clock) {
  for (int i = 0; i < std::max(1, answer_threads); ++i) answer_threads_.emplace_back([this] { RunAnswers(); });
}

JoinBoard::~JoinBoard() {
  Shutdown();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    ready_added_.SignalAll();
  }
  for (std::thread& thread : answer_threads_) thread.join();
}

JoinBoard::Waiter JoinBoard::Remove(WaitId id) {
  auto it = waiters_.find(id);
  Waiter waiter = std::move(it->second);
  waiters_.erase(it);
  auto job = waiting_on_.find(waiter.wait.job_id);
  job->second.erase(id);
  if (job->second.empty()) waiting_on_.erase(job);
  deadlines_.Remove(id, waiter.deadline);
  return waiter;
}

void JoinBoard::Publish(const std::string& job_id, JoinView view) {
  std::vector<Failed> failed;
  {
    absl::MutexLock lock(&mu_);
    const JoinView& published = views_[job_id] = std::move(view);
    auto waiting = waiting_on_.find(job_id);
    if (waiting == waiting_on_.end()) return;
    std::vector<std::pair<WaitId, Verdict>> settled;
    for (WaitId id : waiting->second) {
      Verdict verdict = Judge(&published, waiters_.at(id).wait);
      if (verdict.settled()) settled.emplace_back(id, std::move(verdict));
    }
    for (auto& [id, verdict] : settled) {
      Waiter waiter = Remove(id);
      if (verdict.answer != nullptr) {
        ready_.push_back({std::move(verdict.answer), std::move(verdict.checkpoint_path),
                          std::move(waiter.wait.worker_id), std::move(waiter.done)});
      } else {
        failed.emplace_back(std::move(waiter.done), std::move(verdict.error));
      }
    }
    if (!ready_.empty()) ready_added_.SignalAll();
  }
  Deliver(failed);
}

void JoinBoard::Shutdown() {
  std::vector<Failed> failed;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    while (!waiters_.empty()) {
      failed.emplace_back(Remove(waiters_.begin()->first).done,
                          absl::UnavailableError("coordinator is shutting down"));
    }
  }
  Deliver(failed);
  // The answers already settled are delivered before the server stops.
  absl::MutexLock lock(&mu_);
  auto delivered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ready_.empty() && delivering_ == 0; };
  mu_.Await(absl::Condition(&delivered));
}

JoinBoard::WaitId JoinBoard::Wait(JoinWait wait, Done done) {
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    auto view = views_.find(wait.job_id);
    Verdict verdict = Judge(view == views_.end() ? nullptr : &view->second, wait);
    if (verdict.answer != nullptr) {
      ready_.push_back(
          {std::move(verdict.answer), std::move(verdict.checkpoint_path), std::move(wait.worker_id), std::move(done)});
      ready_added_.Signal();
      return 0;
    }
    if (!verdict.error.ok()) {
      error = std::move(verdict.error);
    } else if (shut_down_) {
      error = absl::UnavailableError("coordinator is shutting down");
    } else if (wait.wait <= absl::ZeroDuration()) {
      error = DeadlineError(view->second, wait);
    } else {
      const WaitId id = next_id_++;
      const double deadline = deadlines_.DeadlineIn(wait.wait);
      deadlines_.Add(id, deadline);
      waiting_on_[wait.job_id].insert(id);
      waiters_.emplace(id, Waiter{std::move(wait), deadline, std::move(done)});
      return id;
    }
  }
  done(std::move(error));
  return 0;
}

void JoinBoard::Cancel(WaitId id) {
  Done done;
  {
    absl::MutexLock lock(&mu_);
    if (!waiters_.contains(id)) return;  // answered already
    done = Remove(id).done;
  }
  done(absl::CancelledError("the caller cancelled the join"));
}

void JoinBoard::Expire(const std::vector<WaitId>& ids) {
  std::vector<Failed> failed;
  {
    absl::MutexLock lock(&mu_);
    for (WaitId id : ids) {
      if (!waiters_.contains(id)) continue;  // answered meanwhile
      Waiter waiter = Remove(id);
      absl::Status error = DeadlineError(views_.at(waiter.wait.job_id), waiter.wait);
      failed.emplace_back(std::move(waiter.done), std::move(error));
    }
  }
  Deliver(failed);
}

void JoinBoard::RunAnswers() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (ready_.empty() && !stopping_) ready_added_.Wait(&mu_);
    if (ready_.empty()) return;
    Ready ready = std::move(ready_.front());
    ready_.pop_front();
    ++delivering_;
    mu_.Unlock();
    // The shared answer is immutable and goes by reference (JoinAnswer).
    const int64_t rank = ready.answer->rank_of.at(ready.worker_id);
    ready.done(JoinAnswer{std::move(ready.answer), rank, std::move(ready.checkpoint_path)});
    ready = Ready{};  // the caller's state goes before the drain says delivered
    mu_.Lock();
    --delivering_;  // Shutdown's drain waits for this
  }
}

absl::StatusOr<v1::JoinGenerationResponse> JoinBoard::Await(JoinWait wait, absl::Duration cancel_poll,
                                                            const std::function<bool()>& cancelled) {
  absl::StatusOr<JoinAnswer> answer =
      AwaitAnswer<JoinAnswer>([&](Done done) { return Wait(std::move(wait), std::move(done)); },
                              [this](WaitId id) { Cancel(id); }, cancel_poll, cancelled);
  if (!answer.ok()) return answer.status();
  return answer->Message();
}

size_t JoinBoard::Waiting() {
  absl::MutexLock lock(&mu_);
  return waiters_.size();
}

bool JoinBoard::AwaitWaiting(size_t count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto reached = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiters_.size() == count; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

}  // namespace herd::coordinator
