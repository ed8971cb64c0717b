// Fenced leadership among coordinators sharing one etcd key prefix.
//
// A coordinator campaigns with a lease (granted, then kept alive) and a
// transaction that creates the leader key only where it is absent. The
// key's create revision is the fencing token: EtcdStateStore compares it in
// every write, so a former leader that was paused or partitioned past its
// lease cannot write anything once another one leads. Standbys watch the key
// and campaign again when it is deleted (its lease revoked or expired).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd/etcd_state_store.h"

namespace herd::coordinator {

struct LeadershipOptions {
  std::string key;            // e.g. "/herd/leader"
  std::string identity;       // the key's value: who leads (for people and followers)
  int64_t lease_seconds = 5;  // etcd's minimum useful TTL is about 2 s
  // Called once, from the keep-alive thread, when the lease is gone (expired
  // or revoked) or could not be renewed for a whole lease: stop acting as
  // the leader. Writes are refused by the fence in any case.
  std::function<void()> on_lost;
  // Called from Campaign whenever it learns who leads: the leader key's
  // value, or "" with why nobody can be named (the key is gone and an
  // election is under way, or etcd does not answer). Followers pass it on.
  std::function<void(const std::string& leader, const std::string& why)> on_follow;
};

class EtcdLeadership {
 public:
  // Blocks until this process leads, or `stop()` (checked at least every
  // second) returns true (CANCELLED). Errors from etcd are retried, except
  // a refusal of this client's user (EtcdRefusedAccess), which is returned.
  static absl::StatusOr<std::unique_ptr<EtcdLeadership>> Campaign(std::shared_ptr<EtcdClient> client,
                                                                  LeadershipOptions options,
                                                                  std::function<bool()> stop = nullptr);
  // Stops renewing and resigns (revokes the lease: a standby takes over at
  // once instead of after the TTL).
  ~EtcdLeadership();

  EtcdFence fence() const { return {options_.key, token_}; }
  int64_t token() const { return token_; }
  int64_t lease_id() const { return lease_id_; }
  bool lost() const { return lost_.load(); }

  // Stops renewing the lease without resigning, as a frozen process would:
  // tests of expiry use it.
  void StopRenewingForTest();

  // The leader key's value now ("" when nobody leads).
  static absl::StatusOr<std::string> CurrentLeader(EtcdClient& client, const std::string& key);

 private:
  EtcdLeadership(std::shared_ptr<EtcdClient> client, LeadershipOptions options, int64_t lease_id, int64_t token);
  void RenewUntilStopped();
  void MarkLost();

  std::shared_ptr<EtcdClient> client_;
  LeadershipOptions options_;
  int64_t lease_id_;
  int64_t token_;
  std::atomic<bool> lost_{false};
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace herd::coordinator
