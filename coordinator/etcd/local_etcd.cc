#include "coordinator/etcd/local_etcd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/etcd/etcd_client.h"

namespace herd::coordinator {
namespace {

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string TempRoot() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/etcd.XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  return mkdtemp(buffer.data());
}

}  // namespace

bool LocalEtcd::Installed() { return access(kEtcdBinary, X_OK) == 0; }

absl::StatusOr<std::unique_ptr<LocalEtcd>> LocalEtcd::Start(int members, const LocalEtcdTls* tls,
                                                           const std::vector<std::string>& flags) {
  if (!Installed()) return absl::FailedPreconditionError(absl::StrCat(kEtcdBinary, " is missing"));
  std::unique_ptr<LocalEtcd> etcd(new LocalEtcd());
  etcd->root_ = TempRoot();
  if (tls != nullptr) etcd->client_tls_ = tls->client;
  std::vector<std::string> tls_flags;
  if (tls != nullptr) {
    tls_flags = {"--cert-file=" + tls->cert_file, "--key-file=" + tls->key_file};
    if (!tls->client_ca_file.empty()) {
      tls_flags.push_back("--trusted-ca-file=" + tls->client_ca_file);
      tls_flags.push_back("--client-cert-auth");
    }
  }
  std::vector<std::string> peers;
  std::vector<int> client_ports;
  for (int i = 0; i < members; ++i) {
    client_ports.push_back(FreePort());
    peers.push_back(absl::StrCat("e", i, "=http://127.0.0.1:", FreePort()));
  }
  for (int i = 0; i < members; ++i) {
    const std::string name = absl::StrCat("e", i);
    const std::string client_url = absl::StrCat(tls ? "https" : "http", "://127.0.0.1:", client_ports[i]);
    const std::string peer_url = peers[i].substr(name.size() + 1);
    etcd->endpoints_.push_back(absl::StrCat("127.0.0.1:", client_ports[i]));
    // setpriv: the member dies with the test process even when that crashes
    // and no destructor runs.
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--pdeathsig", "KILL", "--", kEtcdBinary};
    for (const std::string& flag :
         std::vector<std::string>{"--name=" + name, "--data-dir=" + etcd->root_ + "/" + name,
                                  "--listen-client-urls=" + client_url, "--advertise-client-urls=" + client_url,
                                  "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
                                  "--initial-cluster=" + absl::StrJoin(peers, ","), "--initial-cluster-state=new",
                                  "--initial-cluster-token=" + etcd->root_, "--logger=zap", "--log-level=warn"}) {
      argv.push_back(flag);
    }
    argv.insert(argv.end(), tls_flags.begin(), tls_flags.end());
    argv.insert(argv.end(), flags.begin(), flags.end());
    etcd->argvs_.push_back(argv);
    etcd->members_.push_back(std::make_unique<testing::Process>(std::move(argv), etcd->root_ + "/" + name + ".log"));
  }
  // Ready when a write commits through every member: each is up and Raft
  // has a leader. A member still starting refuses at once, hence the pause
  // between rounds; each round connects afresh (a channel that was refused
  // would wait out gRPC's reconnect backoff).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  absl::Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const std::string& endpoint : etcd->endpoints_) {
      auto client = EtcdClient::Connect({endpoint}, /*call_timeout_seconds=*/2, etcd->client_tls_);
      if (!client.ok()) return client.status();
      etcdserverpb::PutRequest put;
      put.set_key("/local-etcd/ready");
      last = (*client)->Put(put).status();
      if (!last.ok()) break;
    }
    if (last.ok()) return etcd;
    for (auto& member : etcd->members_) {
      if (!member->Running()) {
        return absl::InternalError(absl::StrCat("etcd exited while starting: ", member->Log()));
      }
    }
    usleep(100 * 1000);  // a member that refuses at once: do not spin
  }
  return absl::DeadlineExceededError(absl::StrCat("etcd did not start within 30 s: ", last.message()));
}

void LocalEtcd::Kill(int index) {
  members_.at(index)->Signal(SIGKILL);
  members_.at(index)->Wait(std::chrono::seconds(10));
}

void LocalEtcd::Restart(int index) {
  members_.at(index) = std::make_unique<testing::Process>(argvs_.at(index),
                                                         absl::StrCat(root_, "/e", index, ".restarted.log"));
}

absl::Status LocalEtcd::EnableAuth(const std::string& root_password, const std::vector<LocalEtcdUser>& users) {
  auto credentials = MakeChannelCredentials(client_tls_, EtcdTlsFlagNames());
  if (!credentials.ok()) return credentials.status();
  auto auth = etcdserverpb::Auth::NewStub(grpc::CreateChannel(endpoints_.at(0), *credentials));
  std::string failed;
  auto check = [&](const char* what, const grpc::Status& status) {
    if (!status.ok() && failed.empty()) failed = absl::StrCat(what, ": ", status.error_message());
  };
  auto deadline = [](grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  };
  auto add_user = [&](const std::string& name, const std::string& password, const std::string& role) {
    grpc::ClientContext add_context, role_context, grant_context;
    deadline(add_context);
    deadline(role_context);
    deadline(grant_context);
    etcdserverpb::AuthRoleAddRequest role_request;
    role_request.set_name(role);
    etcdserverpb::AuthRoleAddResponse role_response;
    check("role add", auth->RoleAdd(&role_context, role_request, &role_response));
    etcdserverpb::AuthUserAddRequest user_request;
    user_request.set_name(name);
    user_request.set_password(password);
    etcdserverpb::AuthUserAddResponse user_response;
    check("user add", auth->UserAdd(&add_context, user_request, &user_response));
    etcdserverpb::AuthUserGrantRoleRequest grant;
    grant.set_user(name);
    grant.set_role(role);
    etcdserverpb::AuthUserGrantRoleResponse granted;
    check("user grant-role", auth->UserGrantRole(&grant_context, grant, &granted));
  };
  add_user("root", root_password, "root");
  for (const LocalEtcdUser& user : users) {
    const std::string role = user.name + "-role";
    add_user(user.name, user.password, role);
    grpc::ClientContext context;
    deadline(context);
    etcdserverpb::AuthRoleGrantPermissionRequest request;
    request.set_name(role);
    request.mutable_perm()->set_permtype(user.access);
    request.mutable_perm()->set_key(user.prefix);
    request.mutable_perm()->set_range_end(PrefixRangeEnd(user.prefix));
    etcdserverpb::AuthRoleGrantPermissionResponse response;
    check("role grant-permission", auth->RoleGrantPermission(&context, request, &response));
  }
  grpc::ClientContext context;
  deadline(context);
  etcdserverpb::AuthEnableResponse enabled;
  check("auth enable", auth->AuthEnable(&context, {}, &enabled));
  if (!failed.empty()) return absl::InternalError(absl::StrCat("etcd: enabling authentication: ", failed));
  return absl::OkStatus();
}

// An Auth stub on member 0 with root's token (`root_token`).
absl::StatusOr<std::unique_ptr<etcdserverpb::Auth::Stub>> LocalEtcd::AsRoot(const std::string& root_password,
                                                                           std::string* root_token) const {
  auto credentials = MakeChannelCredentials(client_tls_, EtcdTlsFlagNames());
  if (!credentials.ok()) return credentials.status();
  auto auth = etcdserverpb::Auth::NewStub(grpc::CreateChannel(endpoints_.at(0), *credentials));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  etcdserverpb::AuthenticateRequest login;
  login.set_name("root");
  login.set_password(root_password);
  etcdserverpb::AuthenticateResponse root;
  grpc::Status status = auth->Authenticate(&context, login, &root);
  if (!status.ok()) return absl::InternalError(absl::StrCat("etcd: root: ", status.error_message()));
  *root_token = root.token();
  return auth;
}

absl::Status LocalEtcd::ChangePassword(const std::string& root_password, const std::string& user,
                                       const std::string& password) {
  std::string token;
  auto auth = AsRoot(root_password, &token);
  if (!auth.ok()) return auth.status();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  context.AddMetadata("token", token);
  etcdserverpb::AuthUserChangePasswordRequest request;
  request.set_name(user);
  request.set_password(password);
  etcdserverpb::AuthUserChangePasswordResponse response;
  grpc::Status status = (*auth)->UserChangePassword(&context, request, &response);
  if (!status.ok()) return absl::InternalError(absl::StrCat("etcd: user passwd: ", status.error_message()));
  return absl::OkStatus();
}

absl::Status LocalEtcd::CycleAuth(const std::string& root_password) {
  std::string token;
  auto root = AsRoot(root_password, &token);
  if (!root.ok()) return root.status();
  auto& auth = *root;
  auto deadline = [](grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  };
  grpc::ClientContext disable_context;
  deadline(disable_context);
  disable_context.AddMetadata("token", token);
  etcdserverpb::AuthDisableResponse disabled;
  grpc::Status status = auth->AuthDisable(&disable_context, {}, &disabled);
  if (!status.ok()) return absl::InternalError(absl::StrCat("etcd: auth disable: ", status.error_message()));
  grpc::ClientContext enable_context;
  deadline(enable_context);
  etcdserverpb::AuthEnableResponse enabled;
  status = auth->AuthEnable(&enable_context, {}, &enabled);
  if (!status.ok()) return absl::InternalError(absl::StrCat("etcd: auth enable: ", status.error_message()));
  return absl::OkStatus();
}

absl::Status LocalEtcd::AwaitServing(int index) const {
  auto credentials = MakeChannelCredentials(client_tls_, EtcdTlsFlagNames());
  if (!credentials.ok()) return credentials.status();
  auto maintenance = etcdserverpb::Maintenance::NewStub(grpc::CreateChannel(endpoints_.at(index), *credentials));
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(30);
  grpc::Status status;
  while (std::chrono::system_clock::now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    context.set_wait_for_ready(true);  // until the member listens
    etcdserverpb::StatusResponse response;
    status = maintenance->Status(&context, {}, &response);
    if (status.ok() && response.leader() != 0) return absl::OkStatus();
    usleep(100 * 1000);  // listening, but its Raft has no leader yet
  }
  return absl::DeadlineExceededError(
      absl::StrCat("etcd member ", endpoints_.at(index), " did not serve within 30 s: ", status.error_message()));
}

absl::StatusOr<int> LocalEtcd::RaftLeader() const {
  std::string said;
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    auto credentials = MakeChannelCredentials(client_tls_, EtcdTlsFlagNames());
    if (!credentials.ok()) return credentials.status();
    auto channel = grpc::CreateChannel(endpoints_[i], *credentials);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    etcdserverpb::StatusResponse response;
    grpc::Status status = etcdserverpb::Maintenance::NewStub(channel)->Status(&context, {}, &response);
    if (!status.ok()) {
      absl::StrAppend(&said, " ", endpoints_[i], ": ", status.error_message(), ";");
      continue;
    }
    if (response.leader() != 0 && response.leader() == response.header().member_id()) return static_cast<int>(i);
  }
  return absl::UnavailableError(absl::StrCat("no etcd member leads its Raft now;", said));
}

LocalEtcd::~LocalEtcd() {
  members_.clear();  // SIGKILLs each member's process group
  std::error_code ignored;
  std::filesystem::remove_all(root_, ignored);
}

}  // namespace herd::coordinator
