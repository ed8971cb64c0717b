#include "client/commands.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/format.h"
#include "client/progress.h"
#include "client/unreachable.h"
#include "common/control_chars.h"
#include "common/job_spec.h"
#include "common/job_spec_yaml.h"
#include "common/rpc_options.h"
#include "common/status_convert.h"

namespace herd::client {
namespace {

std::unique_ptr<grpc::ClientContext> CallContext(const CommandContext& context) {
  return NewCallContext(context.options.token, context.options.timeout);
}

bool Json(const CommandContext& context) { return context.options.output == OutputFormat::kJson; }

int PrintJson(const CommandContext& context, const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = ToJson(message);
  if (!json.ok()) {
    *context.err << "herd: " << json.status().message() << "\n";
    return kExitFailed;
  }
  *context.out << *json << "\n";
  return kExitOk;
}

absl::StatusOr<v1::JobInfo> GetJob(const CommandContext& context, const std::string& job_id) {
  v1::GetJobRequest request;
  request.set_id(job_id);
  v1::GetJobResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->GetJob(call.get(), request, &response));
  if (!status.ok()) return status;
  return response.job();
}

// Renders the jobs a watch sees: a line redrawn in place on a terminal, JSON
// Lines, or plain lines at most once per period.
class WatchPrinter {
 public:
  explicit WatchPrinter(const CommandContext& context) : context_(context) {}

  int Show(const v1::JobInfo& job) {
    if (seen_any_ && google::protobuf::util::MessageDifferencer::Equals(job, last_)) return kExitOk;
    bool state_changed = !seen_any_ || job.state() != last_.state();
    seen_any_ = true;
    last_ = job;
    double now = context_.clock->Now();
    rate_.Observe(now, job.step());
    if (Json(context_)) return PrintJson(context_, job);
    if (IsFinalState(job.state())) return kExitOk;  // Finish() prints the summary
    if (context_.options.tty) {
      *context_.out << "\r" << TtyProgressLine(job, rate_.StepsPerSecond()) << "\x1b[K" << std::flush;
      line_open_ = true;
      return kExitOk;
    }
    bool due = !printed_any_ || now - last_print_ >= context_.options.plain_progress_period_seconds;
    if (state_changed || due) {
      *context_.out << PlainProgressLine(job, rate_.StepsPerSecond()) << "\n" << std::flush;
      printed_any_ = true;
      last_print_ = now;
    }
    return kExitOk;
  }

  // Ends an in-place line before anything else is printed.
  void CloseLine() {
    if (line_open_) *context_.out << "\n" << std::flush;
    line_open_ = false;
  }

  int Finish(const v1::JobInfo& job) {
    CloseLine();
    if (!Json(context_)) *context_.out << FinalSummary(job) << "\n" << std::flush;
    return job.state() == v1::SUCCEEDED ? kExitOk : kExitFailed;
  }

 private:
  const CommandContext& context_;
  StepRateTracker rate_;
  v1::JobInfo last_;
  bool seen_any_ = false;
  bool printed_any_ = false;
  bool line_open_ = false;
  double last_print_ = 0;
};

int Watch(const CommandContext& context, const std::string& job_id) {
  WatchPrinter printer(context);
  absl::StatusOr<v1::JobInfo> job = GetJob(context, job_id);
  if (!job.ok()) return ReportRpcError(context, job.status());
  printer.Show(*job);
  while (!IsFinalState(job->state())) {
    v1::WatchJobRequest request;
    request.set_id(job_id);
    auto call = NewCallContext(context.options.token, context.options.watch_stream_period);
    auto reader = context.stub->WatchJob(call.get(), request);
    v1::WatchJobEvent event;
    bool got_event = false;
    while (reader->Read(&event)) {
      got_event = true;
      *job = event.job();
      printer.Show(*job);
      if (IsFinalState(job->state())) {
        call->TryCancel();  // the server ends the stream anyway; do not wait for it
        break;
      }
    }
    if (IsFinalState(job->state())) {
      while (reader->Read(&event)) {
      }
      reader->Finish();
      break;
    }
    absl::Status status = FromGrpcStatus(reader->Finish());
    if (!status.ok() && !absl::IsDeadlineExceeded(status)) {
      printer.CloseLine();
      return ReportRpcError(context, status);
    }
    // The stream ended or ran its period out: make sure the coordinator
    // still answers (a silent one must not hang us), then watch again.
    job = GetJob(context, job_id);
    if (!job.ok()) {
      printer.CloseLine();
      return ReportRpcError(context, job.status());
    }
    printer.Show(*job);
    // A server that closes streams at once must not make us spin.
    if (!got_event && status.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return printer.Finish(*job);
}

}  // namespace

int ReportRpcError(const CommandContext& context, const absl::Status& status) {
  const std::string message(status.message());
  if (absl::IsDeadlineExceeded(status) || (absl::IsUnavailable(status) && IsConnectFailure(message))) {
    *context.err << "herd: "
                 << EscapeControlChars(CannotReach({context.options.coordinator}, ConnectFailureCause(message)))
                 << "\n";
    return kExitUnreachable;
  }
  if (absl::IsUnavailable(status)) {
    // It answered, and says it cannot serve now (its etcd is down, or it
    // stopped leading): not "cannot reach".
    *context.err << "herd: the coordinator at " << context.options.coordinator
                 << " is unavailable: " << EscapeControlChars(message) << "\n";
    return kExitUnreachable;
  }
  // Messages may quote names and reasons: printed inert.
  *context.err << "herd: " << absl::StatusCodeToString(status.code()) << ": "
               << EscapeControlChars(status.message()) << "\n";
  return kExitFailed;
}

int SubmitCommand(const CommandContext& context, const std::string& job_file, bool watch,
                  std::optional<int64_t> priority) {
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpecFile(job_file);
  if (!spec.ok()) {
    *context.err << "herd: " << EscapeControlChars(spec.status().message()) << "\n";
    return kExitUsage;
  }
  if (priority.has_value()) spec->set_priority(*priority);
  // Check locally for a quick, precise error; the coordinator checks again
  // and applies the same defaults to what we send.
  v1::JobSpec checked = *spec;
  ApplyJobDefaults(&checked);
  if (absl::Status valid = ValidateJobSpec(checked); !valid.ok()) {
    *context.err << "herd: " << job_file << ": " << EscapeControlChars(valid.message()) << "\n";
    return kExitUsage;
  }
  v1::SubmitJobRequest request;
  *request.mutable_spec() = *spec;
  v1::SubmitJobResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->SubmitJob(call.get(), request, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (watch) {
    // JSON watch output starts with the job itself, so no separate document.
    if (!Json(context)) *context.out << response.job().id() << "\n" << std::flush;
    return Watch(context, response.job().id());
  }
  if (Json(context)) return PrintJson(context, response.job());
  *context.out << response.job().id() << "\n";
  return kExitOk;
}

int ListCommand(const CommandContext& context) {
  v1::ListJobsResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->ListJobs(call.get(), v1::ListJobsRequest(), &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (Json(context)) return PrintJson(context, response);
  *context.out << JobsTable({response.jobs().begin(), response.jobs().end()}, context.clock->Now());
  return kExitOk;
}

int StatusCommand(const CommandContext& context, const std::string& job_id) {
  absl::StatusOr<v1::JobInfo> job = GetJob(context, job_id);
  if (!job.ok()) return ReportRpcError(context, job.status());
  if (Json(context)) return PrintJson(context, *job);
  *context.out << JobDetail(*job, context.clock->Now());
  return kExitOk;
}

int WatchCommand(const CommandContext& context, const std::string& job_id) { return Watch(context, job_id); }

int CancelCommand(const CommandContext& context, const std::string& job_id) {
  v1::CancelJobRequest request;
  request.set_id(job_id);
  v1::CancelJobResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->CancelJob(call.get(), request, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (Json(context)) return PrintJson(context, response.job());
  *context.out << response.job().id() << " " << JobStateName(response.job().state()) << "\n";
  return kExitOk;
}

int ResizeCommand(const CommandContext& context, const std::string& job_id, int64_t min_workers, int64_t max_workers) {
  v1::ResizeJobRequest request;
  request.set_id(job_id);
  request.set_min_workers(min_workers);
  request.set_max_workers(max_workers);
  v1::ResizeJobResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->ResizeJob(call.get(), request, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (Json(context)) return PrintJson(context, response.job());
  const v1::JobSpec& spec = response.job().spec();
  *context.out << response.job().id() << " workers " << spec.min_workers() << ".." << spec.max_workers() << "\n";
  return kExitOk;
}

int PriorityCommand(const CommandContext& context, const std::string& job_id, int64_t priority) {
  v1::SetJobPriorityRequest request;
  request.set_id(job_id);
  request.set_priority(priority);
  v1::SetJobPriorityResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->SetJobPriority(call.get(), request, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (Json(context)) return PrintJson(context, response.job());
  *context.out << response.job().id() << " priority " << response.job().spec().priority() << "\n";
  return kExitOk;
}

int WorkersCommand(const CommandContext& context) {
  v1::ListWorkersResponse response;
  auto call = CallContext(context);
  absl::Status status =
      FromGrpcStatus(context.stub->ListWorkers(call.get(), v1::ListWorkersRequest(), &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (Json(context)) return PrintJson(context, response);
  *context.out << WorkersTable({response.workers().begin(), response.workers().end()}, context.clock->Now());
  return kExitOk;
}

int CordonCommand(const CommandContext& context, const std::string& worker_id, bool cordoned) {
  v1::CordonWorkerRequest request;
  request.set_worker_id(worker_id);
  request.set_cordoned(cordoned);
  v1::CordonWorkerResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->CordonWorker(call.get(), request, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (Json(context)) return PrintJson(context, response.worker());
  *context.out << EscapeControlChars(worker_id) << (cordoned ? " cordoned" : " uncordoned") << "\n";
  return kExitOk;
}

namespace {

// Polls the worker list until `worker_id` runs no job; the last info seen.
absl::StatusOr<v1::WorkerInfo> WaitUntilLeft(const CommandContext& context, const std::string& worker_id,
                                             double timeout_seconds) {
  const double start = context.clock->Now();
  bool announced = false;
  while (true) {
    v1::ListWorkersResponse listed;
    auto call = CallContext(context);
    absl::Status status = FromGrpcStatus(context.stub->ListWorkers(call.get(), v1::ListWorkersRequest(), &listed));
    if (!status.ok()) return status;
    auto it = std::find_if(listed.workers().begin(), listed.workers().end(),
                           [&](const v1::WorkerInfo& w) { return w.id() == worker_id; });
    if (it == listed.workers().end()) return absl::NotFoundError(absl::StrCat("worker ", worker_id, " not found"));
    if (it->state() != v1::BUSY) return *it;
    const double waited = context.clock->Now() - start;
    if (timeout_seconds > 0 && waited >= timeout_seconds) {
      return absl::DeadlineExceededError(absl::StrCat("worker ", worker_id, " still runs job ", it->job_id(),
                                                      " after ", static_cast<int64_t>(waited), " s (--wait-timeout)"));
    }
    if (!announced) {
      *context.err << "waiting for " << EscapeControlChars(worker_id) << " to leave job "
                   << EscapeControlChars(it->job_id()) << " at its next step boundary...\n";
      announced = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace

int DrainCommand(const CommandContext& context, const DrainOptions& drain) {
  const std::string& worker_id = drain.worker_id;
  v1::DrainWorkerRequest request;
  request.set_worker_id(worker_id);
  v1::DrainWorkerResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->DrainWorker(call.get(), request, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (drain.wait) {
    auto left = WaitUntilLeft(context, worker_id, drain.timeout_seconds);
    if (!left.ok()) {
      // A timeout is the drain's failure, not the coordinator's silence.
      if (left.status().code() == absl::StatusCode::kDeadlineExceeded) {
        *context.err << "herd drain: " << EscapeControlChars(left.status().message()) << "\n";
        return kExitFailed;
      }
      return ReportRpcError(context, left.status());
    }
    *response.mutable_worker() = *left;
  }
  if (Json(context)) return PrintJson(context, response);
  *context.out << EscapeControlChars(worker_id) << " cordoned";
  if (response.released_jobs_size() > 0) {
    *context.out << (drain.wait ? "; left job " : "; leaves job ")
                 << EscapeControlChars(absl::StrJoin(response.released_jobs(), ", "))
                 << (drain.wait ? " at a step boundary" : " at the next step boundary");
  }
  *context.out << "\n";
  return kExitOk;
}

int CheckpointsCommand(const CommandContext& context, const std::string& job_id) {
  v1::ListCheckpointsRequest request;
  request.set_job_id(job_id);
  v1::ListCheckpointsResponse response;
  auto call = CallContext(context);
  absl::Status status = FromGrpcStatus(context.stub->ListCheckpoints(call.get(), request, &response));
  if (!status.ok()) return ReportRpcError(context, status);
  if (Json(context)) return PrintJson(context, response);
  *context.out << CheckpointsTable({response.checkpoints().begin(), response.checkpoints().end()},
                                   context.clock->Now());
  return kExitOk;
}

}  // namespace herd::client
