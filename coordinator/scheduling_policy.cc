#include "coordinator/scheduling_policy.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/spec_enums.h"
#include "coordinator/island_members.h"
#include "coordinator/placement.h"

namespace herd::coordinator {
namespace {

// A RUNNING job the scheduler may take workers from: formed, settled (not
// recovering, nobody finished) and nothing of it released yet this round.
bool Preemptable(const JobRecord& job) {
  const Generation& generation = job.generation;
  return job.info.state() == v1::RUNNING && generation.formed && !job.recovering && generation.finished.empty();
}

// What one RUNNING job can give this round.
struct Candidate {
  const JobRecord* job = nullptr;
  // Members not yet asked to leave, highest rank first (rank 0 holds the
  // commit and writes checkpoints: it leaves last).
  std::vector<std::string> staying;
  int64_t above_min = 0;   // how many of `staying` may go while it keeps running
  bool suspended = false;  // this round's plan suspends it
};

// A worker already asked to leave by the scheduler: it becomes IDLE at its
// job's next step boundary.
struct Coming {
  std::string worker_id;
  const WorkerRecord* worker = nullptr;
  int64_t priority = 0;  // of the job it leaves
};

// Whether `worker_id` could run `spec`: its device kind and labels fit.
bool Fits(const ClusterState& state, const std::string& worker_id, const v1::JobSpec& spec) {
  auto worker = state.workers.find(worker_id);
  return worker != state.workers.end() && worker->second.device_kind == SpecName(spec.device()) &&
         FitsPlacement(worker->second.labels, spec);
}

// The members `candidate` gives a job that needs `missing` more workers
// fitting `spec`: the highest ranks that fit, while it keeps min_workers.
// With islands whose minimum is over 1 (sync.min_workers_per_island) no
// island is left below it, since at the re-form such an island sits out
// (island_members.h) and the job would lose more than the plan counted:
// first members beyond their island's minimum, highest rank first; then,
// while more are missing, whole islands, the one of the highest rank
// first, even where that gives more than `missing`.
std::vector<std::string> ChooseReleased(const ClusterState& state, const Candidate& candidate,
                                        const v1::JobSpec& spec, int64_t missing) {
  std::vector<std::string> chosen;
  const int64_t room = std::min(missing, candidate.above_min);
  const v1::SyncSpec& sync = candidate.job->info.spec().sync();
  const int64_t minimum = sync.min_workers_per_island();
  if (sync.islands_by().empty() || minimum <= 1) {
    for (const std::string& member : candidate.staying) {
      if (static_cast<int64_t>(chosen.size()) >= room) break;
      if (Fits(state, member, spec)) chosen.push_back(member);
    }
    return chosen;
  }
  std::map<std::string, std::vector<std::string>> islands;  // staying members, highest rank first
  for (const std::string& member : candidate.staying) {
    islands[IslandOfWorker(state, sync.islands_by(), member)].push_back(member);
  }
  std::map<std::string, int64_t> left;
  for (const auto& [island, members] : islands) left[island] = static_cast<int64_t>(members.size());
  std::set<std::string> taken;
  for (const std::string& member : candidate.staying) {
    if (static_cast<int64_t>(chosen.size()) >= room) break;
    const std::string island = IslandOfWorker(state, sync.islands_by(), member);
    if (left[island] - 1 < minimum || !Fits(state, member, spec)) continue;
    chosen.push_back(member);
    taken.insert(member);
    --left[island];
  }
  std::set<std::string> tried;
  for (const std::string& member : candidate.staying) {
    if (static_cast<int64_t>(chosen.size()) >= missing) break;
    const std::string island = IslandOfWorker(state, sync.islands_by(), member);
    if (!tried.insert(island).second) continue;
    std::vector<std::string> rest;
    for (const std::string& each : islands[island]) {
      if (!taken.count(each)) rest.push_back(each);
    }
    const bool all_fit = std::all_of(rest.begin(), rest.end(), [&](const std::string& each) { return Fits(state, each, spec); });
    if (!all_fit || static_cast<int64_t>(chosen.size() + rest.size()) > candidate.above_min) continue;
    chosen.insert(chosen.end(), rest.begin(), rest.end());
  }
  return chosen;
}

// `staying` reordered for a waiting job with islands of a minimum over 1
// (`spec`): members whose island (by the waiting job's key) the fewest
// more workers complete first, given the workers `pool` already brings;
// islands the victim cannot complete last. Ties keep the victim's order
// (its rank 0 last). Without such islands, `staying` as it is.
std::vector<std::string> HelpfulFirst(const ClusterState& state, const v1::JobSpec& spec,
                                      const std::vector<std::string>& pool, std::vector<std::string> staying) {
  const std::string& key = spec.sync().islands_by();
  const int64_t minimum = spec.sync().min_workers_per_island();
  if (key.empty() || minimum <= 1) return staying;
  std::map<std::string, int64_t> have, offered;
  for (const std::string& worker : pool) ++have[IslandOfWorker(state, key, worker)];
  for (const std::string& member : staying) {
    if (Fits(state, member, spec)) ++offered[IslandOfWorker(state, key, member)];
  }
  const auto missing_in = [&](const std::string& member) {
    const std::string island = IslandOfWorker(state, key, member);
    const int64_t deficit = std::max<int64_t>(0, minimum - have[island]);
    return deficit <= offered[island] ? deficit : minimum + 1;
  };
  std::stable_sort(staying.begin(), staying.end(),
                   [&](const std::string& a, const std::string& b) { return missing_in(a) < missing_in(b); });
  return staying;
}

std::vector<const JobRecord*> Sorted(const ClusterState& state, v1::JobState job_state) {
  std::vector<const JobRecord*> jobs;
  for (const auto& [id, job] : state.jobs) {
    if (job.info.state() == job_state) jobs.push_back(&job);
  }
  std::sort(jobs.begin(), jobs.end(), [](const JobRecord* a, const JobRecord* b) { return ServedBefore(*a, *b); });
  return jobs;
}

}  // namespace

bool ServedBefore(const JobRecord& a, const JobRecord& b) {
  if (a.info.spec().priority() != b.info.spec().priority()) return a.info.spec().priority() > b.info.spec().priority();
  return a.submit_seq < b.submit_seq;
}

SchedulePlan PlanSchedule(const ClusterState& state, const SchedulePolicyOptions& options) {
  SchedulePlan plan;
  std::set<std::string> taken;  // idle workers this plan starts a job on or reserves

  std::vector<Candidate> candidates;  // lowest priority first, newest first among equals
  std::vector<Coming> coming;
  const std::vector<const JobRecord*> running = Sorted(state, v1::RUNNING);
  for (auto it = running.rbegin(); it != running.rend(); ++it) {
    const JobRecord& job = **it;
    for (const auto& [worker_id, reason] : job.release_requested) {
      auto worker = state.workers.find(worker_id);
      if (!IsSchedulerRelease(reason) || worker == state.workers.end() || job.generation.RankOf(worker_id) < 0) continue;
      coming.push_back({worker_id, &worker->second, job.info.spec().priority()});
    }
    if (!Preemptable(job)) continue;
    Candidate candidate;
    candidate.job = &job;
    for (auto member = job.generation.members.rbegin(); member != job.generation.members.rend(); ++member) {
      if (!job.release_requested.count(*member)) candidate.staying.push_back(*member);
    }
    candidate.above_min =
        std::max<int64_t>(0, static_cast<int64_t>(candidate.staying.size()) - job.info.spec().min_workers());
    candidates.push_back(std::move(candidate));
  }

  for (const JobRecord* job : Sorted(state, v1::PENDING)) {
    const v1::JobSpec& spec = job->info.spec();
    std::vector<std::string> idle;
    for (const std::string& id : IdleWorkersFor(state, job->info.id(), spec, "", /*honor_reservations=*/false)) {
      if (!taken.count(id)) idle.push_back(id);
    }
    const int64_t need = spec.min_workers();
    // With islands, one short of its minimum sits out (island_members.h).
    const std::vector<std::string> chosen = ChooseMembers(state, spec, {}, idle, spec.max_workers());
    if (static_cast<int64_t>(chosen.size()) >= need) {
      taken.insert(chosen.begin(), chosen.end());
      plan.starts.push_back({job->info.id(), chosen});
      continue;
    }
    // It does not fit: count the workers already on their way to it, then
    // what lower-priority jobs can give, shrinking before suspending. Only
    // workers whose device kind and labels fit the job count, and with
    // islands only those ChooseMembers would take (an island short of its
    // minimum sits out), so no job is shrunk for workers that cannot start it.
    std::vector<std::string> pool = idle;
    const auto short_of = [&] {
      return std::max<int64_t>(
          0, need - static_cast<int64_t>(ChooseMembers(state, spec, {}, pool, spec.max_workers()).size()));
    };
    int64_t missing = need - static_cast<int64_t>(chosen.size());
    const auto lower = [&](int64_t priority) { return priority < spec.priority(); };
    std::vector<size_t> claimed;
    for (size_t i = 0; i < coming.size() && missing > 0; ++i) {
      if (!lower(coming[i].priority) || coming[i].worker->device_kind != SpecName(spec.device()) ||
          !FitsPlacement(coming[i].worker->labels, spec)) {
        continue;
      }
      claimed.push_back(i);
      pool.push_back(coming[i].worker_id);
      missing = short_of();
    }
    std::vector<Candidate> trial = candidates;  // kept only when the job can start that way
    std::vector<MemberRelease> releases;
    std::map<std::string, Preemption> preempted;
    for (Candidate& candidate : trial) {
      if (missing == 0) break;
      const JobRecord& victim = *candidate.job;
      if (!lower(victim.info.spec().priority()) || candidate.suspended) continue;
      Candidate offer = candidate;
      offer.staying = HelpfulFirst(state, spec, pool, candidate.staying);
      const std::vector<std::string> released = ChooseReleased(state, offer, spec, missing);
      for (const std::string& member : released) {
        releases.push_back({victim.info.id(), member, ReleaseReason::kShrink});
        candidate.staying.erase(std::find(candidate.staying.begin(), candidate.staying.end(), member));
        pool.push_back(member);
      }
      const int64_t take = static_cast<int64_t>(released.size());
      candidate.above_min -= take;
      missing = short_of();
      if (take > 0) preempted[victim.info.id()] = Preemption::kShrink;
    }
    for (Candidate& candidate : trial) {
      if (missing == 0) break;
      const JobRecord& victim = *candidate.job;
      const int64_t fitting = std::count_if(candidate.staying.begin(), candidate.staying.end(),
                                            [&](const std::string& member) { return Fits(state, member, spec); });
      if (!options.suspend || !lower(victim.info.spec().priority()) || candidate.suspended ||
          !victim.info.spec().preemptible() || fitting == 0) {
        continue;
      }
      // Every member leaves, those this round meant to shrink included.
      releases.erase(std::remove_if(releases.begin(), releases.end(),
                                    [&](const MemberRelease& r) { return r.job_id == victim.info.id(); }),
                     releases.end());
      for (auto member = victim.generation.members.rbegin(); member != victim.generation.members.rend(); ++member) {
        if (!victim.release_requested.count(*member)) {
          releases.push_back({victim.info.id(), *member, ReleaseReason::kSuspend});
        }
      }
      for (const std::string& member : candidate.staying) {
        if (Fits(state, member, spec)) pool.push_back(member);
      }
      missing = short_of();
      candidate.staying.clear();
      candidate.above_min = 0;
      candidate.suspended = true;
      preempted[victim.info.id()] = Preemption::kSuspend;
    }
    if (missing > 0) continue;  // preempting could not start it: take nothing, reserve nothing
    candidates = std::move(trial);
    for (auto it = claimed.rbegin(); it != claimed.rend(); ++it) coming.erase(coming.begin() + *it);
    for (const std::string& id : idle) {
      taken.insert(id);
      plan.reserved[id] = job->info.id();
    }
    plan.waiting[job->info.id()] = {static_cast<int64_t>(idle.size()), need};
    plan.releases.insert(plan.releases.end(), releases.begin(), releases.end());
    plan.preempted.insert(preempted.begin(), preempted.end());
  }
  return plan;
}

}  // namespace herd::coordinator
