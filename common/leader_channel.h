// A client's way to the leading coordinator among several addresses
// (--coordinator=h1:7070,h2:7070; a single address works as it always did).
// Calls go to the address believed to lead. A follower's answer names the
// leader (common/leader_redirect.h): the next attempt goes there. An address
// that does not answer passes the turn to the next one in the list. Workers,
// trainers and the CLI all reach the coordinator through this class.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc_options.h"

namespace herd {

// "h1:7070, h2:7070" -> {"h1:7070", "h2:7070"}; an error naming the entry
// that is empty or not HOST:PORT, or a duplicate.
absl::StatusOr<std::vector<std::string>> ParseCoordinatorAddresses(const std::string& list);

// True for the answers that say "ask another address": UNAVAILABLE (refused,
// unreachable, or a follower) and DEADLINE_EXCEEDED (a hung process).
bool ShouldTryElsewhere(const grpc::Status& status);

// Where to go after `failed` (an address) answered `status` with `hint` (the
// leader it named, or ""): the hint when there is one, else the list's next
// address after `failed` (the first when `failed` is not in the list).
std::string NextAddress(const std::vector<std::string>& addresses, const std::string& failed,
                        const grpc::Status& status, const std::string& hint);

struct LeaderCallPolicy {
  // Passes over the addresses before giving up (each pass also follows one
  // leader hint per address); a pause grows between passes.
  int passes = 1;
  std::chrono::milliseconds first_pause{100};
  std::chrono::milliseconds max_pause{2000};
  // A DEADLINE_EXCEEDED moves on to the next address within the call too
  // (for short probes; a long call's time is spent and it returns).
  bool retry_after_deadline = false;
};

class LeaderChannel {
 public:
  static absl::StatusOr<std::shared_ptr<LeaderChannel>> Open(const std::string& addresses, const TlsOptions& tls);
  // One channel made elsewhere (tests), called "channel" in errors.
  static std::shared_ptr<LeaderChannel> Over(std::shared_ptr<grpc::Channel> channel);

  const std::vector<std::string>& addresses() const { return addresses_; }
  // The address believed to lead now, and a channel to it.
  std::string current_address();
  std::shared_ptr<grpc::Channel> current();
  // A channel to `address` (one per address, made on first use, and made
  // anew after a call on it ran out of time).
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address);

  // After a call to `address` failed with `status`: the next call goes to the
  // leader its trailers named, or to the next address. Thread-safe; a call
  // that succeeded or failed for its own reasons changes nothing.
  void Learn(const std::string& address, const grpc::Status& status, const grpc::ClientContext& context);

  // Runs `attempt` (one RPC on `context`, made fresh by `new_context` for each
  // try) until an answer that is not "ask elsewhere", following hints and
  // moving past dead addresses, for `policy.passes` passes. Gives up with
  // UNAVAILABLE naming every address tried and what each said. A
  // DEADLINE_EXCEEDED is returned as it is unless the policy says otherwise,
  // though the next call goes elsewhere, on a fresh connection: a TCP
  // connection that lost packets through an outage may sit in retransmission
  // backoff for minutes after the path is back, while a new one is up in one
  // round trip.
  using Attempt = std::function<grpc::Status(const std::shared_ptr<grpc::Channel>&, grpc::ClientContext*)>;
  using NewContext = std::function<std::unique_ptr<grpc::ClientContext>()>;
  grpc::Status Call(const NewContext& new_context, const Attempt& attempt, const LeaderCallPolicy& policy = {});

 private:
  // Drops `channel` if it is still the one to `address`.
  void Forget(const std::string& address, const std::shared_ptr<grpc::Channel>& channel);

  LeaderChannel(std::vector<std::string> addresses, TlsOptions tls)
      : addresses_(std::move(addresses)), tls_(std::move(tls)), current_(addresses_.front()) {}

  const std::vector<std::string> addresses_;
  const TlsOptions tls_;
  absl::Mutex mu_;
  std::string current_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  bool remakeable_ ABSL_GUARDED_BY(mu_) = true;  // false for a channel made elsewhere (Over)
};

}  // namespace herd
