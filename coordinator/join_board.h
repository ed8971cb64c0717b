// What JoinGeneration answers, kept apart from the state lock so that the
// ranks of a rendezvous wait, and are answered, without it. The coordinator
// publishes a job's view whenever the job changes (after the change is
// written); a formed generation's answer (peers, spec, start step) is built
// once and shared, and each rank's copy only adds its rank.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/cluster_state.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// The answer every member of one formed generation shares.
struct FormedAnswer {
  v1::JoinGenerationResponse response;  // rank and checkpoint_path unset
  absl::flat_hash_map<std::string, int64_t> rank_of;
};

// One job as its joiners see it.
struct JoinView {
  v1::JobState state = v1::PENDING;
  std::string reason;
  int64_t generation = 0;
  bool formed = false;
  std::string checkpoint_path;  // the newest checkpoint's, "" when none
  std::shared_ptr<const FormedAnswer> answer;  // while RUNNING with a formed generation
};

// The view of `job`. `previous` (may be null): the job's last view, whose
// answer is reused when the generation, its members, start step and spec
// are the same and `members_changed` is false (a member's address or labels
// may have changed).
JoinView JoinViewOf(const ClusterState& state, const JobRecord& job, const JoinView* previous,
                    bool members_changed);

class JoinBoard {
 public:
  // `max_copying`: answers copied at once (see Await).
  explicit JoinBoard(int max_copying = 2) : max_copying_(max_copying) {}

  void Publish(const std::string& job_id, JoinView view);
  // Every waiting and later Await answers UNAVAILABLE.
  void Shutdown();

  // JoinGeneration's wait: returns the answer for `worker_id` once the job
  // runs a formed generation newer than `after_generation` that has it as a
  // member. NOT_FOUND for an unknown job, FAILED_PRECONDITION for a final
  // one, DEADLINE_EXCEEDED at `deadline` (naming what it waited for;
  // `wait_ms` as asked), CANCELLED once `cancelled` says so (asked every
  // `cancel_poll`).
  absl::StatusOr<v1::JoinGenerationResponse> Await(const std::string& job_id, const std::string& worker_id,
                                                   int64_t after_generation, absl::Time deadline, int64_t wait_ms,
                                                   absl::Duration cancel_poll, const std::function<bool()>& cancelled);

 private:
  absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, JoinView> views_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  const int max_copying_;
  absl::Mutex copy_mu_;
  int copying_ ABSL_GUARDED_BY(copy_mu_) = 0;
};

}  // namespace herd::coordinator
