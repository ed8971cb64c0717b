// The token etcd's Authenticate RPC gave this client, shared by every call.
//
// etcd's tokens end: a simple token after --auth-token-ttl of disuse (5 min
// by default) and on every member restart, a JWT at its expiry. A call
// refused for its token asks for a fresh one, once: Invalidate drops the
// token the call used, and the next Get authenticates again. Authentication
// is single-flight: Get holds the lock while it asks etcd, so callers that
// find the token gone together wait for one Authenticate, not one each, and
// a token another caller already renewed is not dropped again.
#pragma once

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace herd::coordinator {

class EtcdAuthToken {
 public:
  // Asks etcd for a token; "" when etcd's authentication is off (calls then
  // carry none).
  using Authenticate = std::function<absl::StatusOr<std::string>()>;

  // The current token, from `authenticate` when there is none.
  absl::StatusOr<std::string> Get(const Authenticate& authenticate);
  // Drops `stale` when it is still the current token (a call was refused
  // with it); a token renewed since stays.
  void Invalidate(const std::string& stale);
  // How many times etcd answered Authenticate (tests of expiry).
  int authentications() const;

 private:
  mutable absl::Mutex mu_;
  bool known_ ABSL_GUARDED_BY(mu_) = false;
  std::string token_ ABSL_GUARDED_BY(mu_);
  int authentications_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace herd::coordinator
