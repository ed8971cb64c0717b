#include "coordinator/etcd/leadership.h"

#include <glog/logging.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace herd::coordinator {
namespace {

// Between campaign attempts that etcd refused or did not answer.
constexpr absl::Duration kRetryPause = absl::Milliseconds(500);

// What one campaign attempt found: we lead (token), or someone else does
// and the key should be watched from `watch_from`.
struct Attempt {
  bool leading = false;
  int64_t token = 0;
  int64_t watch_from = 0;
  std::string leader;  // the key's value when another leads
};

void Follow(const LeadershipOptions& options, const std::string& leader, const std::string& why) {
  if (options.on_follow) options.on_follow(leader, why);
}

absl::StatusOr<Attempt> TryToLead(EtcdClient& client, const LeadershipOptions& options, int64_t lease_id) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key(options.key);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(options.key);
  put->set_value(options.identity);
  put->set_lease(lease_id);
  txn.add_failure()->mutable_request_range()->set_key(options.key);
  auto response = client.Txn(txn);
  if (!response.ok()) return response.status();
  Attempt attempt;
  if (response->succeeded()) {
    attempt.leading = true;
    attempt.token = response->header().revision();  // the revision that created the key
    return attempt;
  }
  attempt.watch_from = response->header().revision() + 1;
  if (response->responses_size() > 0 && response->responses(0).response_range().kvs_size() > 0) {
    attempt.leader = response->responses(0).response_range().kvs(0).value();
  }
  return attempt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdLeadership>> EtcdLeadership::Campaign(std::shared_ptr<EtcdClient> client,
                                                                         LeadershipOptions options,
                                                                         std::function<bool()> stop) {
  if (options.key.empty()) return absl::InvalidArgumentError("leadership: no leader key");
  if (options.lease_seconds < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("leadership: a lease of ", options.lease_seconds, " s is too short for etcd (2 s at least)"));
  }
  absl::Status last_error;
  while (stop == nullptr || !stop()) {
    auto lease = client->LeaseGrant(options.lease_seconds);
    // A wrong password or a missing permission: waiting does not mend it.
    if (!lease.ok() && EtcdRefusedAccess(lease.status())) return lease.status();
    if (!lease.ok()) {
      LOG_IF(WARNING, lease.status() != last_error) << "leadership: " << lease.status() << " (retrying)";
      last_error = lease.status();
      Follow(options, "", absl::StrCat("etcd does not answer: ", lease.status().message()));
      absl::SleepFor(kRetryPause);
      continue;
    }
    auto attempt = TryToLead(*client, options, lease->id());
    if (attempt.ok() && attempt->leading) {
      return std::unique_ptr<EtcdLeadership>(
          new EtcdLeadership(std::move(client), std::move(options), lease->id(), attempt->token));
    }
    client->LeaseRevoke(lease->id()).IgnoreError();  // unused: do not leave it to expire
    if (!attempt.ok() && EtcdRefusedAccess(attempt.status())) return attempt.status();
    if (!attempt.ok()) {
      LOG_IF(WARNING, attempt.status() != last_error) << "leadership: " << attempt.status() << " (retrying)";
      last_error = attempt.status();
      Follow(options, "", absl::StrCat("etcd does not answer: ", attempt.status().message()));
      absl::SleepFor(kRetryPause);
      continue;
    }
    // Someone leads: wait for the key to go, a second at a time so that
    // `stop` is honoured.
    Follow(options, attempt->leader, "");
    while (stop == nullptr || !stop()) {
      absl::Status deleted = client->WaitForDelete(options.key, attempt->watch_from, 1);
      if (deleted.ok()) Follow(options, "", "the leader's lease ended; an election is under way");
      if (deleted.ok() || !absl::IsDeadlineExceeded(deleted)) break;
    }
  }
  return absl::CancelledError("leadership: campaign stopped");
}

EtcdLeadership::EtcdLeadership(std::shared_ptr<EtcdClient> client, LeadershipOptions options, int64_t lease_id,
                               int64_t token)
    : client_(std::move(client)), options_(std::move(options)), lease_id_(lease_id), token_(token) {
  LOG(INFO) << "leadership: leading as " << options_.identity << " (" << options_.key << ", token " << token_ << ")";
  renewer_ = std::thread([this] { RenewUntilStopped(); });
}

EtcdLeadership::~EtcdLeadership() {
  StopRenewingForTest();
  if (!lost()) client_->LeaseRevoke(lease_id_).IgnoreError();
}

void EtcdLeadership::StopRenewingForTest() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (renewer_.joinable()) renewer_.join();
}

void EtcdLeadership::MarkLost() {
  if (lost_.exchange(true)) return;
  LOG(ERROR) << "leadership: lost (" << options_.key << ", token " << token_ << "): stepping down";
  if (options_.on_lost) options_.on_lost();
}

void EtcdLeadership::RenewUntilStopped() {
  // Three renewals a lease: one lost answer costs nothing.
  const absl::Duration period = absl::Seconds(options_.lease_seconds) / 3;
  absl::Time renewed = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) return;
    }
    auto ttl = client_->LeaseKeepAliveOnce(lease_id_, absl::ToDoubleSeconds(period));
    if (ttl.ok() && *ttl > 0) {
      renewed = absl::Now();
      continue;
    }
    if (ttl.ok() || absl::Now() - renewed >= absl::Seconds(options_.lease_seconds)) {
      // Gone (TTL 0), or unrenewed for a whole lease: it may have expired.
      MarkLost();
      return;
    }
    LOG(WARNING) << "leadership: lease not renewed (" << ttl.status() << "); retrying";
  }
}

absl::StatusOr<std::string> EtcdLeadership::CurrentLeader(EtcdClient& client, const std::string& key) {
  etcdserverpb::RangeRequest get;
  get.set_key(key);
  auto response = client.Range(get);
  if (!response.ok()) return response.status();
  return response->kvs_size() == 0 ? std::string() : response->kvs(0).value();
}

}  // namespace herd::coordinator
