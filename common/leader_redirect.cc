#include "common/leader_redirect.h"

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

// Finishes at once: the request is never read.
class Redirect : public grpc::ServerGenericBidiReactor {
 public:
  Redirect(grpc::GenericCallbackServerContext* context, const std::string& leader, const std::string& why) {
    if (!leader.empty()) context->AddTrailingMetadata(kLeaderMetadataKey, leader);
    Finish(NotLeaderStatus(leader, why));
  }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::Status NotLeaderStatus(const std::string& leader, const std::string& why) {
  if (leader.empty()) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("not the leader; no coordinator leads now (", why, ")"));
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, absl::StrCat("not the leader; the leader is ", leader));
}

std::string LeaderHint(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto found = trailers.find(kLeaderMetadataKey);
  if (found == trailers.end()) return "";
  return std::string(found->second.data(), found->second.size());
}

void NotLeaderService::SetLeader(const std::string& leader, const std::string& why) {
  absl::MutexLock lock(&mu_);
  leader_ = leader;
  why_ = why;
}

grpc::ServerGenericBidiReactor* NotLeaderService::CreateReactor(grpc::GenericCallbackServerContext* context) {
  absl::MutexLock lock(&mu_);
  return new Redirect(context, leader_, why_);
}

}  // namespace herd
