#include "worker/train/generation_loop.h"

#include <glog/logging.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/comm/peer_fault.h"
#include "worker/train/generation/healing.h"
#include "worker/train/generation/liveness.h"
#include "worker/train/generation/roll_call.h"
#include "worker/train/generation/waiting_mark.h"

namespace herd {

absl::StatusOr<v1::JoinGenerationResponse> JoinWithin(CoordinatorLink* client, std::chrono::milliseconds timeout,
                                                      int64_t after_generation, bool at_boundary) {
  constexpr std::chrono::milliseconds kChunk{10000};
  constexpr std::chrono::milliseconds kMaxBackoff{2000};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds backoff{100};
  while (true) {
    MarkAlive();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto joined =
        client->JoinGeneration(std::max(std::min(left, kChunk), std::chrono::milliseconds(1)), after_generation,
                               at_boundary);
    if (joined.ok()) {
      if (absl::Status marked = MarkJoined(joined->generation()); !marked.ok()) LOG(WARNING) << marked;
      return joined;
    }
    const absl::StatusCode code = joined.status().code();
    // A coordinator that cannot be reached for a moment (starved, restarting,
    // handing over to a standby) costs a retry, not the trainer: only the
    // timeout ends the wait.
    if (code == absl::StatusCode::kUnavailable && left > backoff) {
      LOG(WARNING) << "joining: " << joined.status() << "; retrying in " << backoff.count() << " ms";
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, kMaxBackoff);
      continue;
    }
    if (code != absl::StatusCode::kDeadlineExceeded || left <= kChunk) return joined;
  }
}

namespace {

// True when the coordinator heard it (or had already moved on).
bool ReportFailure(CoordinatorLink* client, const v1::JoinGenerationResponse& join, const absl::Status& failure,
                   int64_t step, bool job_error = false) {
  v1::ReportFailureRequest report;
  report.set_step(step);
  report.set_job_error(job_error);
  if (std::optional<PeerFault> peer = PeerFaultOf(failure); peer.has_value() && peer->rank != join.rank()) {
    report.set_peer_fault(peer->kind == PeerFaultKind::kClosed ? v1::PEER_FAULT_CLOSED : v1::PEER_FAULT_LATE);
    report.set_peer_rank(peer->rank);
    if (std::optional<bool> answered = LatePeerAnswered(failure); answered.has_value()) {
      report.set_peer_roll_call(*answered ? v1::PEER_ROLL_CALL_ANSWERED : v1::PEER_ROLL_CALL_SILENT);
    }
    if (std::optional<int> by = LatePeerBlamedBy(failure); by.has_value() && *by != join.rank()) {
      report.set_peer_blamed_by(*by);
    }
  }
  report.set_job_id(client->job_id());
  report.set_generation(join.generation());
  report.set_rank(join.rank());
  report.set_worker_id(client->worker_id());
  report.set_message(std::string(failure.message()).substr(0, 1000));
  // FAILED_PRECONDITION: a peer reported it first, the generation is gone.
  absl::Status reported = client->ReportFailure(report);
  if (!reported.ok() && reported.code() != absl::StatusCode::kFailedPrecondition) {
    LOG(WARNING) << "could not report the failure of generation " << join.generation() << ": " << reported;
    return false;
  }
  return true;
}

// How long a trainer waits for the generation after one whose failure it
// reported before it reports it again.
constexpr std::chrono::milliseconds kReportAgainAfter{10000};

}  // namespace

absl::StatusOr<v1::JoinGenerationResponse> JoinAfter(CoordinatorLink* client, const v1::JoinGenerationResponse& failed,
                                                     const GenerationResult& end, int64_t step, bool reported,
                                                     std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool reform = end.outcome == GenerationOutcome::kReformed;
  const bool released = IsBoundary(end.outcome);
  const bool failure = end.outcome == GenerationOutcome::kGenerationFailed;
  // A fenced generation is already replaced; a failure is news to the coordinator.
  bool report = failure && !reported;
  bool heard = reported;
  while (true) {
    if (report) heard = ReportFailure(client, failed, end.error, step) || heard;
    // Once the coordinator heard the failure, a newer generation exists or
    // forms: the join waits for it. Asking for the current one instead can
    // be answered with the failed generation itself while the coordinator's
    // answer to joins still shows it, and cost a pause below.
    const int64_t after = released || (failure && heard) ? failed.generation() : 0;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    // Still, the report is sent again now and then, should the coordinator
    // that heard it not have kept it (a failover).
    if (failure) left = std::min(left, kReportAgainAfter);
    auto next = JoinWithin(client, std::max(left, std::chrono::milliseconds(1)), after, reform);
    const bool retry = !next.ok() && (next.status().code() == absl::StatusCode::kUnavailable ||
                                      next.status().code() == absl::StatusCode::kDeadlineExceeded);
    if (!next.ok() && !retry) return next.status();
    if (next.ok() && next->generation() > failed.generation()) return next;
    // DEADLINE_EXCEEDED from the wait: this worker is not (yet) a member of
    // a newer generation, e.g. it was left out while its lease had lapsed.
    // It keeps its context and waits to be re-admitted, up to `timeout`.
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no generation after ", failed.generation(), " formed within ",
                                                      timeout.count(), " ms"));
    }
    // The coordinator is down or still runs the failed generation: report
    // again once it can hear it.
    report = !released;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

GenerationResult RunGenerations(CoordinatorLink* client, TrainingContext* context, v1::JoinGenerationResponse first,
                                const GenerationLoopOptions& options) {
  v1::JoinGenerationResponse join = std::move(first);
  while (true) {
    GenerationResult end;
    bool reported = false;
    int64_t step = 0;
    {
      Trainer trainer(client, context, join, options.communicators);
      end = trainer.Run();
      step = trainer.step_reached();
      // Told while this rank's connections are still open: the peers see
      // no broken collective before the coordinator knows the job's error,
      // so their reports cannot be taken for the cause. The exit code says
      // it again, should this report be lost. A collective failure is
      // reported first likewise: the peer it blames is then the one that
      // failed, not a rank that closed its connections after its own failure.
      if (end.outcome == GenerationOutcome::kJobFailed) {
        ReportFailure(client, join, end.error, step, /*job_error=*/true);
      }
      if (end.outcome == GenerationOutcome::kGenerationFailed) {
        // A timeout or closed connection that names nobody (Gloo, NCCL) is
        // first resolved by a roll call among the ranks, connections still
        // open (roll_call.h). A late peer that a failure names may itself
        // be waiting on another (waits are transitive, across communicators
        // too: a vote that the hung rank half sent holds one peer while the
        // other moved on to the next collective and blames it), so with
        // islands, or where ranks post waiting marks, every failure answers
        // the roll call and a late peer is followed to the rank that hangs,
        // or found alive behind a cut link. With marks that costs a hung
        // rank named at once nothing: it is neither answered nor waiting.
        const int world_size = static_cast<int>(join.world_size());
        const int rank = static_cast<int>(join.rank());
        const std::optional<PeerFault> peer = PeerFaultOf(end.error);
        const std::chrono::milliseconds wait = RollCallWait(context->CollectiveTimeout());
        // The same on every rank of the job: whether its peers posted
        // waiting marks (waiting_mark.h), which spare the roll call its wait.
        const bool marks = PostsWaitingMarks(context->device().is_cuda(), world_size);
        const bool answers = world_size > 1 && (marks || !join.spec().sync().islands_by().empty());
        const bool follows_late_peer = answers && peer.has_value() && peer->kind == PeerFaultKind::kLate;
        // When this rank found the failure, apart from the roll call's wait
        // that follows: the time from a hang to the survivors' next step is
        // read off these lines (the outcome and the report come after).
        if (NeedsRollCall(end.error, world_size) || follows_late_peer) {
          LOG(WARNING) << "generation " << join.generation() << " failed at rank " << rank << " ("
                       << absl::StatusCodeToString(end.error.code()) << "): calling the roll, "
                       << (marks ? "ranks found waiting on their peers alive at once, answers waited for up to "
                                 : "up to ")
                       << wait.count() << " ms, before reporting it";
        }
        if (NeedsRollCall(end.error, world_size)) {
          std::shared_ptr<RendezvousStore> store = client->KvStore(join.generation());
          end.error = BlameByRollCall(end.error, *store, join.generation(), rank, world_size, wait, marks);
        } else if (follows_late_peer) {
          std::shared_ptr<RendezvousStore> store = client->KvStore(join.generation());
          end.error = FollowLateBlame(end.error, *store, join.generation(), rank, world_size, wait, marks);
        } else if (answers) {
          AnswerRollCall(*client->KvStore(join.generation()), join.generation(), rank);
        }
        reported = ReportFailure(client, join, end.error, step);
      }
    }  // Destroyed here: its connections close, so peers still waiting on it fail fast.
    if (!JoinsNextGeneration(end.outcome)) return end;
    if (end.outcome == GenerationOutcome::kReformed) {
      LOG(INFO) << "generation " << join.generation() << " ends at rank " << join.rank() << ": " << Describe(end)
                << "; joining the next one from the commit of step " << context->committed().step;
    } else if (end.outcome == GenerationOutcome::kPeerReleased) {
      LOG(INFO) << "generation " << join.generation() << " ends at rank " << join.rank() << ": " << Describe(end)
                << "; waiting for the job to re-form without it, from the commit of step " << context->committed().step;
    } else {
      LOG(WARNING) << "generation " << join.generation() << " failed at rank " << join.rank() << ": " << end.error
                   << "; keeping the job context and the commit of step " << context->committed().step
                   << " in memory, waiting for the next generation";
      if (context->metrics() != nullptr) context->metrics()->ObserveGenerationFailure();
    }
    auto next = JoinAfter(client, join, end, step, reported, options.join_timeout);
    if (!next.ok()) {
      return GenerationResult::Of(absl::Status(next.status().code(),
                                               absl::StrCat("after generation ", join.generation(), " failed (",
                                                            Describe(end), "): ", next.status().message())));
    }
    join = std::move(*next);
  }
}

}  // namespace herd
