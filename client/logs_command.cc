// `herd logs JOB [--rank R] [--follow] [--tail N]`: a trainer's log, read
// through the coordinator from the worker that runs (or ran) that rank.
#include <nlohmann/json.hpp>

#include "client/commands.h"
#include "client/log_lines.h"
#include "common/control_chars.h"
#include "common/rpc_options.h"
#include "common/status_convert.h"

namespace herd::client {
namespace {

// Reading a whole log takes longer than a unary call; following one lasts as
// long as the trainer.
constexpr std::chrono::minutes kReadDeadline{10};
constexpr std::chrono::hours kFollowDeadline{24 * 7};

}  // namespace

int LogsCommand(const CommandContext& context, const LogsOptions& logs) {
  v1::GetJobLogsRequest request;
  request.set_job_id(logs.job_id);
  request.set_rank(logs.rank);
  request.set_follow(logs.follow);
  request.set_tail_lines(logs.tail_lines);
  auto deadline = logs.follow ? std::chrono::duration_cast<std::chrono::milliseconds>(kFollowDeadline)
                              : std::max<std::chrono::milliseconds>(kReadDeadline, context.options.timeout);
  auto call = NewCallContext(context.options.token, deadline);
  auto reader = context.stub->GetJobLogs(call.get(), request);
  std::string worker_id;
  const bool json = context.options.output == OutputFormat::kJson;
  // Table output escapes control characters line by line (a log may hold
  // anything a job printed); JSON keeps the text exact, one object a line.
  LogLines lines([&](absl::string_view line) {
    if (json) {
      nlohmann::json object = {{"job_id", logs.job_id}, {"rank", logs.rank}, {"worker_id", worker_id},
                               {"line", std::string(line)}};
      *context.out << object.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      *context.out << EscapeControlChars(line) << "\n";
    }
    context.out->flush();
  });
  v1::LogChunk chunk;
  while (reader->Read(&chunk)) {
    if (!chunk.worker_id().empty()) worker_id = chunk.worker_id();
    lines.Add(chunk.data());
  }
  lines.Finish();
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (!status.ok()) return ReportRpcError(context, status);
  return kExitOk;
}

}  // namespace herd::client
