#include "client/leader_lookup.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "client/unreachable.h"
#include "common/grpc_serving.h"

namespace herd::client {

absl::StatusOr<std::string> FindLeader(LeaderChannel& coordinators, std::chrono::milliseconds timeout) {
  const bool several = coordinators.addresses().size() > 1;
  LeaderCallPolicy policy;
  policy.passes = several ? 6 : 1;  // 0.25 + 0.5 + 1 + 2 + 2 s of pauses: a lease of 5 s runs out
  policy.first_pause = std::chrono::milliseconds(250);
  policy.retry_after_deadline = true;  // a hung coordinator: ask the next one
  const std::chrono::milliseconds probe_timeout = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(2));
  std::string answered;
  AddressAnswers answers;
  grpc::Status status = coordinators.Call(
      [&] {
        auto context = std::make_unique<grpc::ClientContext>();
        context->set_deadline(std::chrono::system_clock::now() + probe_timeout);
        return context;
      },
      [&](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context) {
        answered = coordinators.current_address();
        bool serving = false;
        grpc::Status status = CallHealthCheck(channel, "", context, &serving);
        if (!status.ok()) {
          answers.Note(answered, status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                     ? absl::StrCat("no answer within ",
                                                    std::chrono::duration<double>(probe_timeout).count(), " s")
                                     : status.error_message());
        }
        return status;
      },
      policy);
  // Any answer but "ask elsewhere" (a server without the health service
  // answers UNIMPLEMENTED) means this address serves.
  if (!ShouldTryElsewhere(status)) return answered;
  if (!several) return coordinators.addresses().front();
  return absl::UnavailableError(CannotReach(coordinators.addresses(), answers.Reason()));
}

}  // namespace herd::client
