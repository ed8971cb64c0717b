#include "coordinator/etcd/etcd_auth_token.h"

namespace herd::coordinator {

absl::StatusOr<std::string> EtcdAuthToken::Get(const Authenticate& authenticate) {
  absl::MutexLock lock(&mu_);
  if (known_) return token_;
  auto token = authenticate();
  if (!token.ok()) return token.status();
  known_ = true;
  token_ = *std::move(token);
  ++authentications_;
  return token_;
}

void EtcdAuthToken::Invalidate(const std::string& stale) {
  absl::MutexLock lock(&mu_);
  if (known_ && token_ == stale) {
    known_ = false;
    token_.clear();
  }
}

int EtcdAuthToken::authentications() const {
  absl::MutexLock lock(&mu_);
  return authentications_;
}

}  // namespace herd::coordinator
