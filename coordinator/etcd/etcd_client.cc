#include "coordinator/etcd/etcd_client.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>

#include <glog/logging.h>

#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_convert.h"

namespace herd::coordinator {
namespace {

std::chrono::system_clock::time_point After(double seconds) {
  return std::chrono::system_clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

// Failures that say "try another member": it is down, partitioned, has no
// Raft leader, or did not answer in time. Anything else is the request's.
bool MemberTrouble(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// Whether gRPC says the connection failed in its TLS handshake: the
// member's certificate did not verify, or it does not speak TLS.
bool TlsHandshakeFailed(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  const std::string message = absl::AsciiStrToLower(status.error_message());
  return absl::StrContains(message, "handshake") || absl::StrContains(message, "ssl") ||
         absl::StrContains(message, "certificate");
}

// Whether the member closed the connection in the handshake: a member that
// does not speak TLS on this port does (etcd with http client URLs).
bool ClosedInHandshake(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  const std::string message = absl::AsciiStrToLower(status.error_message());
  return absl::StrContains(message, "socket closed") || absl::StrContains(message, "connection reset");
}

// Whether the member ended the connection when it read the first call. Over
// TLS 1.3 this is how a member refuses the client's certificate (or its
// absence): the client's handshake completes, and the member's alert ends
// the connection afterwards.
bool ClosedBeforeAnswering(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return false;
  return absl::StrContains(absl::AsciiStrToLower(status.error_message()), "endpoint read failed");
}

// What etcd says when a call's token is no longer good: expired or
// forgotten (a member's restart), issued before the users or roles changed,
// or none where etcd's authentication was turned on since the last token.
bool TokenRefused(const grpc::Status& status) {
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return absl::StrContains(message, "invalid auth token");
    case grpc::StatusCode::INVALID_ARGUMENT:
      return absl::StrContains(message, "revision of auth store is old") ||
             absl::StrContains(message, "user name is empty");
    default:
      return false;
  }
}

// etcd's word for a request without a user where its authentication is on.
bool UserRequired(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
         absl::StrContains(status.error_message(), "user name is empty");
}

constexpr char kTokenMetadata[] = "token";  // as etcd's own clients send it

}  // namespace

bool EtcdRefusedAccess(const absl::Status& status) {
  if (absl::IsPermissionDenied(status)) return true;
  return absl::IsUnauthenticated(status) && !absl::StrContains(status.message(), "invalid auth token");
}

std::string PrefixRangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

TlsFlagNames EtcdTlsFlagNames() { return {"--etcd-cacert", "--etcd-cert", "--etcd-key"}; }

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Connect(const std::vector<std::string>& endpoints,
                                                                double call_timeout_seconds, const TlsOptions& tls,
                                                                EtcdCredentials credentials) {
  if (endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints given");
  if (credentials.enabled() && credentials.password.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("etcd user ", credentials.user, ": no password given"));
  }
  // The only place the etcd channels' credentials are made: every member
  // the same way.
  auto channel_credentials = MakeChannelCredentials(tls, EtcdTlsFlagNames());
  if (!channel_credentials.ok()) return channel_credentials.status();
  std::vector<Member> members;
  for (std::string endpoint : endpoints) {
    if (absl::StartsWith(endpoint, "https://")) {
      if (!tls.enabled()) {
        return absl::InvalidArgumentError(
            absl::StrCat("etcd endpoint ", endpoint, " is https: give --etcd-cacert (and --etcd-cert, --etcd-key)"));
      }
      endpoint = endpoint.substr(8);
    } else if (absl::StartsWith(endpoint, "http://")) {
      if (tls.enabled()) {
        return absl::InvalidArgumentError(
            absl::StrCat("etcd endpoint ", endpoint, " is plain http, but --etcd-cacert/--etcd-cert ask for TLS"));
      }
      endpoint = endpoint.substr(7);
    }
    if (endpoint.empty() || endpoint.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("etcd endpoint \"", endpoint, "\" is not host:port"));
    }
    Member member;
    member.endpoint = tls.enabled() ? absl::StrCat("https://", endpoint) : endpoint;
    grpc::ChannelArguments args;
    // A whole prefix is read in pages (EtcdStateStore::Load), but one job's
    // record may be large: allow up to etcd's own request limit and more.
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    member.channel = grpc::CreateCustomChannel(endpoint, *channel_credentials, args);
    member.kv = etcdserverpb::KV::NewStub(member.channel);
    member.lease = etcdserverpb::Lease::NewStub(member.channel);
    member.watch = etcdserverpb::Watch::NewStub(member.channel);
    member.auth = etcdserverpb::Auth::NewStub(member.channel);
    members.push_back(std::move(member));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(endpoints, std::move(members), call_timeout_seconds,
                                                    tls.enabled(), std::move(credentials)));
}

absl::StatusOr<std::string> EtcdClient::TokenFor(Member& member) {
  if (!credentials_.enabled()) return std::string();
  return token_.Get([&]() -> absl::StatusOr<std::string> {
    // Under the token's lock: one reader of the file and the password at a
    // time.
    if (!credentials_.password_file.empty()) {
      auto reread = ReadEtcdCredentials(credentials_.user, credentials_.password_file);
      if (reread.ok()) {
        credentials_.password = reread->password;
      } else {
        LOG(WARNING) << "etcd: " << reread.status() << "; authenticating with the password read before";
      }
    }
    grpc::ClientContext context;
    Prepare(context, 0, "");
    etcdserverpb::AuthenticateRequest request;
    request.set_name(credentials_.user);
    request.set_password(credentials_.password);
    etcdserverpb::AuthenticateResponse response;
    const grpc::Status status = member.auth->Authenticate(&context, request, &response);
    if (status.ok()) return response.token();
    if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
        absl::StrContains(status.error_message(), "authentication is not enabled")) {
      // Calls go without a token; should etcd turn authentication on later,
      // its first refusal ("user name is empty") authenticates again.
      LOG(WARNING) << "etcd " << member.endpoint << " has authentication off: --etcd-user " << credentials_.user
                   << " is not used (anyone who reaches etcd may write herd's state)";
      return std::string();
    }
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
        absl::StrContains(status.error_message(), "authentication failed")) {
      return absl::UnauthenticatedError(
          absl::StrCat("authentication failed for etcd user \"", credentials_.user,
                       "\" (check --etcd-user and --etcd-password-file): ", status.error_message()));
    }
    return FromGrpcStatus(status);
  });
}

void EtcdClient::Prepare(grpc::ClientContext& context, double timeout_seconds, const std::string& token) const {
  context.set_deadline(After(timeout_seconds > 0 ? timeout_seconds : call_timeout_seconds_));
  if (!token.empty()) context.AddMetadata(kTokenMetadata, token);
}

std::string EtcdClient::Describe(const Member& member, const grpc::Status& status) const {
  if (tls_ && TlsHandshakeFailed(status)) {
    return absl::StrCat(member.endpoint, ": TLS handshake failed (check --etcd-cacert against the member's ",
                        "certificate, and that its client URLs are https): ", status.error_message());
  }
  if (UserRequired(status) && !credentials_.enabled()) {
    return absl::StrCat(member.endpoint, ": etcd requires authentication: give --etcd-user and ",
                        "--etcd-password-file (", status.error_message(), ")");
  }
  if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED && credentials_.enabled()) {
    return absl::StrCat(member.endpoint, ": ", status.error_message(), " (etcd user ", credentials_.user, ")");
  }
  return absl::StrCat(member.endpoint, ": ", status.error_message());
}

absl::Status EtcdClient::CheckTlsHandshakes() {
  std::string refused;
  for (Member& member : members_) {
    grpc::ClientContext context;
    context.set_deadline(After(call_timeout_seconds_));
    etcdserverpb::RangeRequest request;
    request.set_key("/");
    request.set_count_only(true);
    etcdserverpb::RangeResponse response;
    const grpc::Status status = member.kv->Range(&context, request, &response);
    if (status.ok() || !MemberTrouble(status)) return absl::OkStatus();  // it answered
    // On a fresh connection a member that closes it is refusing this TLS
    // setup; on a working one the same words may mean it just went down.
    std::string why;
    if (TlsHandshakeFailed(status)) {
      why = Describe(member, status);
    } else if (ClosedInHandshake(status)) {
      why = absl::StrCat(member.endpoint, ": closed the connection in the TLS handshake (does the member serve TLS? ",
                         "its client URLs must be https): ", status.error_message());
    } else if (ClosedBeforeAnswering(status)) {
      why = absl::StrCat(member.endpoint, ": closed the TLS connection before answering, as a member does that ",
                         "refuses the client certificate (check --etcd-cert and --etcd-key against its ",
                         "--trusted-ca-file): ", status.error_message());
    }
    if (!why.empty()) absl::StrAppend(&refused, refused.empty() ? "" : "; ", why);
  }
  if (refused.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("etcd: no member answered over TLS (", refused, ")"));
}

template <typename Call>
absl::Status EtcdClient::OnSomeMember(const char* what, Call call, double timeout_seconds) {
  const size_t first = current_.load();
  grpc::Status last;
  std::string tried;
  for (size_t i = 0; i < members_.size(); ++i) {
    const size_t index = (first + i) % members_.size();
    Member& member = members_[index];
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto token = TokenFor(member);
      if (!token.ok()) {
        last = ToGrpcStatus(token.status());
        break;
      }
      grpc::ClientContext context;
      Prepare(context, timeout_seconds, *token);
      last = call(member, context);
      if (!credentials_.enabled() || !TokenRefused(last)) break;
      token_.Invalidate(*token);  // the next attempt authenticates again
    }
    if (last.ok()) {
      current_.store(index);
      return absl::OkStatus();
    }
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", Describe(member, last));
    if (!MemberTrouble(last)) break;
  }
  absl::Status status = FromGrpcStatus(last);
  // A token refused twice in a row (etcd restarting again): a moment's
  // trouble, not a refusal of this user.
  if (TokenRefused(last) && credentials_.enabled()) status = absl::UnavailableError(status.message());
  if (UserRequired(last) && !credentials_.enabled()) status = absl::UnauthenticatedError(status.message());
  return absl::Status(status.code(), absl::StrCat("etcd ", what, " failed (", tried, ")"));
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(const etcdserverpb::RangeRequest& request) {
  etcdserverpb::RangeResponse response;
  absl::Status status = OnSomeMember("range", [&](Member& member, grpc::ClientContext& context) {
    return member.kv->Range(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<etcdserverpb::PutResponse> EtcdClient::Put(const etcdserverpb::PutRequest& request) {
  etcdserverpb::PutResponse response;
  absl::Status status = OnSomeMember("put", [&](Member& member, grpc::ClientContext& context) {
    return member.kv->Put(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse response;
  absl::Status status = OnSomeMember("txn", [&](Member& member, grpc::ClientContext& context) {
    return member.kv->Txn(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  absl::Status status = OnSomeMember("lease grant", [&](Member& member, grpc::ClientContext& context) {
    return member.lease->LeaseGrant(&context, request, &response);
  });
  if (!status.ok()) return status;
  if (!response.error().empty()) return absl::UnavailableError(absl::StrCat("etcd lease grant: ", response.error()));
  return response;
}

absl::StatusOr<int64_t> EtcdClient::LeaseKeepAliveOnce(int64_t lease_id, double timeout_seconds) {
  int64_t ttl = 0;
  absl::Status status = OnSomeMember(
      "lease keep-alive",
      [&](Member& member, grpc::ClientContext& context) {
        auto stream = member.lease->LeaseKeepAlive(&context);
        etcdserverpb::LeaseKeepAliveRequest request;
        request.set_id(lease_id);
        etcdserverpb::LeaseKeepAliveResponse response;
        if (!stream->Write(request) || !stream->Read(&response)) {
          context.TryCancel();
          grpc::Status finished = stream->Finish();
          return finished.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream closed") : finished;
        }
        ttl = response.ttl();
        stream->WritesDone();
        context.TryCancel();
        stream->Finish();
        return grpc::Status::OK;
      },
      timeout_seconds);
  if (!status.ok()) return status;
  return ttl;
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  etcdserverpb::LeaseRevokeResponse response;
  return OnSomeMember("lease revoke", [&](Member& member, grpc::ClientContext& context) {
    return member.lease->LeaseRevoke(&context, request, &response);
  });
}

absl::Status EtcdClient::WaitForDelete(const std::string& key, int64_t start_revision, double wait_seconds) {
  Member& member = members_[current_.load() % members_.size()];
  auto token = TokenFor(member);
  if (!token.ok()) {
    return absl::Status(token.status().code(),
                        absl::StrCat("etcd watch of ", key, ": ", member.endpoint, ": ", token.status().message()));
  }
  grpc::ClientContext context;
  Prepare(context, wait_seconds, *token);
  // A member cut off from its cluster's leader ends the watch instead of
  // keeping it open and silent (etcd's "require leader").
  context.AddMetadata("hasleader", "true");
  auto stream = member.watch->Watch(&context);
  etcdserverpb::WatchRequest request;
  request.mutable_create_request()->set_key(key);
  request.mutable_create_request()->set_start_revision(start_revision);
  request.mutable_create_request()->add_filters(etcdserverpb::WatchCreateRequest::NOPUT);
  if (stream->Write(request)) {
    etcdserverpb::WatchResponse response;
    while (stream->Read(&response)) {
      if (response.canceled()) {
        // etcd checks a watch's token when it creates the watch and
        // cancels one whose token it no longer knows ("permission
        // denied"): the caller watches again, with a fresh token.
        if (credentials_.enabled() && absl::StrContains(response.cancel_reason(), "permission denied")) {
          token_.Invalidate(*token);
        }
        break;
      }
      for (const mvccpb::Event& event : response.events()) {
        if (event.type() == mvccpb::Event::DELETE) {
          context.TryCancel();
          stream->Finish();
          return absl::OkStatus();
        }
      }
    }
  }
  context.TryCancel();
  grpc::Status finished = stream->Finish();
  if (finished.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat("etcd watch of ", key, ": no delete within ", wait_seconds, " s"));
  }
  // Unreachable member or a cancelled watch: the caller looks again, and
  // the next call tries the next member.
  current_.store((current_.load() + 1) % members_.size());
  return absl::UnavailableError(
      absl::StrCat("etcd watch of ", key, " ended: ", Describe(member, finished)));
}

}  // namespace herd::coordinator
