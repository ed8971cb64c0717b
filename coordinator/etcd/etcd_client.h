// A small client for etcd's v3 gRPC API (KV, Lease, Watch) over several
// endpoints: a call that finds its endpoint unreachable or too slow moves to
// the next one, so one etcd member down costs a retry, not an outage. With
// credentials it authenticates as an etcd user (Auth.Authenticate) and sends
// the token with every call, renewing it when etcd says it has expired.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/rpc_options.h"
#include "coordinator/etcd/etcd_auth_token.h"
#include "coordinator/etcd/etcd_credentials.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace herd::coordinator {

// The end of the key range that holds every key starting with `prefix`
// (etcd's range_end for a prefix).
std::string PrefixRangeEnd(const std::string& prefix);

// The coordinator flags that name the etcd client's TLS files (etcdctl's
// --cacert, --cert and --key).
TlsFlagNames EtcdTlsFlagNames();

// Whether etcd refused this client for who it is rather than for the
// moment: a wrong user or password, no user where etcd requires one, or a
// role without the permission. Waiting does not mend these.
bool EtcdRefusedAccess(const absl::Status& status);

class EtcdClient {
 public:
  // `endpoints`: "host:port", "http://host:port" or, with TLS,
  // "https://host:port". Connects lazily: a member that is down now is
  // tried again on later calls. `tls`: when enabled, every member is
  // reached over TLS (its files are checked here, errors naming the
  // --etcd-* flags); with a certificate and key, over mutual TLS.
  // `credentials`: when enabled, the etcd user every call acts as.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Connect(const std::vector<std::string>& endpoints,
                                                             double call_timeout_seconds = 5,
                                                             const TlsOptions& tls = {},
                                                             EtcdCredentials credentials = {});

  // One call to every member: OK when one answers. Fails, naming each
  // endpoint, only when none answers and some refused the TLS handshake: a
  // misconfiguration (wrong CA, no client certificate, etcd without TLS)
  // that waiting does not mend. Members merely unreachable pass.
  absl::Status CheckTlsHandshakes();

  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::PutResponse> Put(const etcdserverpb::PutRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);

  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(int64_t ttl_seconds);
  // Renews the lease once; the TTL it has again, 0 when it no longer exists.
  // `timeout_seconds` per member (0: the client's call timeout): shorter
  // than the lease, so a hung member leaves time to try the next one.
  absl::StatusOr<int64_t> LeaseKeepAliveOnce(int64_t lease_id, double timeout_seconds = 0);
  absl::Status LeaseRevoke(int64_t lease_id);

  // Blocks until `key` is deleted at `start_revision` or later (OK), or
  // `wait_seconds` pass (DEADLINE_EXCEEDED), or the stream fails.
  absl::Status WaitForDelete(const std::string& key, int64_t start_revision, double wait_seconds);

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // The etcd user calls act as ("" without authentication).
  const std::string& user() const { return credentials_.user; }
  // How many tokens etcd has issued this client (tests of token expiry).
  int authentications() const { return token_.authentications(); }

 private:
  struct Member {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };

  EtcdClient(std::vector<std::string> endpoints, std::vector<Member> members, double call_timeout_seconds, bool tls,
             EtcdCredentials credentials)
      : endpoints_(std::move(endpoints)),
        members_(std::move(members)),
        call_timeout_seconds_(call_timeout_seconds),
        tls_(tls),
        credentials_(std::move(credentials)) {}

  // The token for calls, authenticating on `member` (the password file
  // read again) when there is none; "" without credentials or when etcd's
  // authentication is off.
  absl::StatusOr<std::string> TokenFor(Member& member);
  // Gives `context` its deadline and token: every call on etcd gets its
  // context here.
  void Prepare(grpc::ClientContext& context, double timeout_seconds, const std::string& token) const;

  // What a failed call on `member` says, naming the member and, when its
  // TLS handshake failed, saying so.
  std::string Describe(const Member& member, const grpc::Status& status) const;

  // Runs `call(member, context)` on the current member, then on each other
  // one while the failure says the member (not the request) is the problem.
  // A call refused for its token (expired, or forgotten when etcd's
  // authentication was turned off and on) is made once more with a fresh
  // one.
  template <typename Call>
  absl::Status OnSomeMember(const char* what, Call call, double timeout_seconds = 0);

  std::vector<std::string> endpoints_;
  std::vector<Member> members_;
  double call_timeout_seconds_;
  bool tls_;
  EtcdCredentials credentials_;
  EtcdAuthToken token_;
  std::atomic<size_t> current_{0};
};

}  // namespace herd::coordinator
