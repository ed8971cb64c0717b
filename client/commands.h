// The `herd` subcommands. Each talks to the coordinator's JobService through
// `stub`, writes its result to `out`, errors to `err`, and returns the exit
// code (see ExitCode).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "common/clock.h"
#include "proto/herd.grpc.pb.h"

namespace herd::client {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,       // the job failed / was cancelled, or the server refused
  kExitUsage = 2,        // bad command line or job file
  kExitUnreachable = 3,  // the coordinator did not answer
};

enum class OutputFormat { kTable, kJson };

struct CommandOptions {
  std::string coordinator;  // named in "cannot reach" errors
  std::string token;        // bearer token; empty for none
  std::chrono::milliseconds timeout{10000};  // deadline of every unary call
  OutputFormat output = OutputFormat::kTable;
  bool tty = false;  // stdout is a terminal: redraw one progress line in place
  // A watch stream is reopened after this long, after checking with GetJob
  // that the coordinator still answers: streams get deadlines too.
  std::chrono::milliseconds watch_stream_period{60000};
  // Non-terminal watch output prints at most one progress line per period.
  double plain_progress_period_seconds = 1;
};

struct CommandContext {
  v1::JobService::StubInterface* stub;
  CommandOptions options;
  std::ostream* out;
  std::ostream* err;
  const Clock* clock;
};

// `priority`, when set, replaces the file's priority.
int SubmitCommand(const CommandContext& context, const std::string& job_file, bool watch,
                  std::optional<int64_t> priority = std::nullopt);
int ListCommand(const CommandContext& context);
int StatusCommand(const CommandContext& context, const std::string& job_id);
int WatchCommand(const CommandContext& context, const std::string& job_id);
int CancelCommand(const CommandContext& context, const std::string& job_id);
int WorkersCommand(const CommandContext& context);
int CheckpointsCommand(const CommandContext& context, const std::string& job_id);
// 0 leaves a bound as it is.
int ResizeCommand(const CommandContext& context, const std::string& job_id, int64_t min_workers, int64_t max_workers);
int PriorityCommand(const CommandContext& context, const std::string& job_id, int64_t priority);

struct LogsOptions {
  std::string job_id;
  int64_t rank = 0;
  bool follow = false;
  int64_t tail_lines = 0;  // 0: the whole log
};
int LogsCommand(const CommandContext& context, const LogsOptions& logs);

// `herd fetch`: the final model (or, with checkpoint_step, a recorded
// checkpoint) into out_dir, checked against the job's recorded SHA-256.
struct FetchOptions {
  std::string job_id;
  std::string out_dir = ".";
  int64_t checkpoint_step = 0;     // 0: the final model
  std::string format = "safetensors";  // of the final model: safetensors or pt
};
int FetchCommand(const CommandContext& context, const FetchOptions& fetch);

// Operator commands (admin role): herd cordon / uncordon / drain WORKER.
int CordonCommand(const CommandContext& context, const std::string& worker_id, bool cordoned);
struct DrainOptions {
  std::string worker_id;
  // Wait until the worker has left every job (IDLE), as kubectl drain does.
  bool wait = false;
  double timeout_seconds = 300;  // with `wait`; 0: no limit
};
int DrainCommand(const CommandContext& context, const DrainOptions& drain);

// Prints `status` as herd reports RPC errors and returns its exit code:
// kExitUnreachable for UNAVAILABLE / DEADLINE_EXCEEDED, else kExitFailed.
int ReportRpcError(const CommandContext& context, const absl::Status& status);

}  // namespace herd::client
