#include "common/leader_redirect.h"

#include <grpcpp/support/byte_buffer.h>

#include <vector>

#include "absl/strings/str_cat.h"

namespace herd {
namespace {

constexpr char kHealthCheckMethod[] = "/grpc.health.v1.Health/Check";

// HealthCheckRequest{service = 1} as sent for kLivenessService.
std::string LivenessRequest() {
  std::string request = {0x0a, static_cast<char>(sizeof(kLivenessService) - 1)};
  return request + kLivenessService;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!buffer.Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return bytes;
}

// Finishes at once with "not the leader", except for a liveness check: its
// request is read and answered SERVING.
class Redirect : public grpc::ServerGenericBidiReactor {
 public:
  Redirect(grpc::GenericCallbackServerContext* context, const std::string& leader, const std::string& why)
      : refusal_(NotLeaderStatus(leader, why)) {
    if (!leader.empty()) context->AddTrailingMetadata(kLeaderMetadataKey, leader);
    if (context->method() == kHealthCheckMethod) {
      StartRead(&request_);
    } else {
      Finish(refusal_);
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok || Bytes(request_) != LivenessRequest()) {
      Finish(refusal_);
      return;
    }
    grpc::Slice serving(std::string{0x08, 0x01});  // HealthCheckResponse{status: SERVING}
    response_ = grpc::ByteBuffer(&serving, 1);
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  const grpc::Status refusal_;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
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
