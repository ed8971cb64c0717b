#include "coordinator/server.h"

#include <grpcpp/resource_quota.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/grpc_serving.h"
#include "common/leader_redirect.h"
#include "common/private_dir.h"
#include "coordinator/standby_server.h"
#include "coordinator/store_spec.h"

namespace herd::coordinator {

std::string WithPort(const std::string& address, int port) {
  size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  return absl::StrCat(host, ":", port);
}

std::string AdvertisedAddress(const std::string& listen, const std::string& hostname) {
  const size_t colon = listen.rfind(':');
  const std::string host = colon == std::string::npos ? "" : listen.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    return absl::StrCat(hostname, listen.substr(colon == std::string::npos ? listen.size() : colon));
  }
  return listen;
}

namespace {

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

bool StoresInEtcd(const StoreOptions& store) {
  auto spec = ParseStoreSpec(store.store);
  return !store.store.empty() && spec.ok() && spec->kind == StoreSpec::Kind::kEtcd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(const ServerOptions& options) {
  // --state-dir: created before the auth file is read, as it always was.
  if (options.store.store.empty()) {
    if (options.store.state_dir.empty()) return absl::InvalidArgumentError("--state-dir is required");
    if (auto status = CreatePrivateDir(options.store.state_dir); !status.ok()) return status;
  }
  std::unique_ptr<Authenticator> auth = Authenticator::Disabled();
  if (!options.auth_file.empty()) {
    auto loaded = Authenticator::FromFile(options.auth_file);
    if (!loaded.ok()) return loaded.status();
    auth = *std::move(loaded);
  }
  auto credentials = MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  StoreOptions store_options = options.store;
  std::string listen = options.listen;
  // etcd: answer "not the leader" on the port while campaigning, so that
  // clients find the leader; the real server takes the port over below.
  std::unique_ptr<StandbyServer> standby;
  if (StoresInEtcd(options.store)) {
    auto started = StandbyServer::Start(options.listen, *credentials);
    if (!started.ok()) return started.status();
    standby = *std::move(started);
    listen = WithPort(options.listen, standby->port());
    store_options.on_follow = [standby = standby.get(), listen, announced = false,
                               on_standby = options.on_standby](const std::string& leader,
                                                                const std::string& why) mutable {
      standby->SetLeader(leader, why);
      if (!announced && on_standby) on_standby(listen);
      announced = true;
    };
  }
  if (store_options.identity.empty()) {
    store_options.identity = options.advertise.empty() ? AdvertisedAddress(listen, HostName()) : options.advertise;
  }
  auto store = OpenStore(store_options);
  if (!store.ok()) return store.status();
  // Leading now; until the state is loaded and the real server binds, callers
  // hear that and retry.
  if (standby != nullptr) standby->SetLeader("", "this coordinator leads and is loading the state");

  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer(options.log_relay));
  server->state_dir_lock_ = std::move(store->lock);
  server->leadership_ = std::move(store->leadership);
  const Clock* clock = options.clock != nullptr ? options.clock : &server->system_clock_;
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->metrics_ = std::make_unique<Metrics>(*server->registry_);
  std::unique_ptr<StateStore> state_store = std::move(store->store);
  if (options.wrap_store) state_store = options.wrap_store(std::move(state_store));
  auto coordinator = Coordinator::Create(options.coordinator, std::move(state_store), clock, server->metrics_.get());
  if (!coordinator.ok()) return coordinator.status();
  server->coordinator_ = *std::move(coordinator);
  server->auth_ = std::move(auth);
  server->edge_ = std::make_unique<RpcEdge>(server->auth_.get(), server->metrics_.get());
  server->job_service_ =
      std::make_unique<JobServiceImpl>(server->coordinator_.get(), server->edge_.get(), &server->log_relay_,
                                       options.job_service);
  server->cluster_service_ = std::make_unique<ClusterServiceImpl>(server->coordinator_.get(), server->edge_.get(),
                                                                   &server->log_relay_);

  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  if (options.max_rpc_threads > 0) {
    grpc::ResourceQuota quota("herd-coordinator");
    quota.SetMaxThreads(options.max_rpc_threads);
    builder.SetResourceQuota(quota);
  }
  builder.RegisterService(server->job_service_.get());
  builder.RegisterService(server->cluster_service_.get());
  standby.reset();  // frees the port for the real server
  auto started = BuildAndStartServer(builder, listen, *credentials);
  if (!started.ok()) return started.status();
  server->server_ = std::move(started->server);
  server->listen_address_ = WithPort(listen, started->port);
  if (auto* health = server->server_->GetHealthCheckService()) health->SetServingStatus(kLivenessService, true);
  server->coordinator_->StartServing();

  if (!options.metrics_listen.empty()) {
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics_listen);
    } catch (const std::exception& e) {  // CivetWeb reports a failed bind by throwing
      return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", options.metrics_listen, ": ", e.what()));
    }
    server->exposer_->RegisterCollectable(server->registry_);
    std::vector<int> ports = server->exposer_->GetListeningPorts();
    if (ports.empty()) return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", options.metrics_listen));
    server->metrics_address_ = WithPort(options.metrics_listen, ports.front());
  }
  return server;
}

CoordinatorServer::~CoordinatorServer() { Shutdown(); }

absl::Status CoordinatorServer::ReloadAuth() { return auth_->Reload(); }

void CoordinatorServer::Shutdown() {
  SetServing(server_.get(), false);
  // Waiting calls (WatchJob, JoinGeneration, KvGet), the daemons' log
  // request streams and the log readers end first, so the gRPC shutdown
  // below does not wait out their timeouts.
  if (coordinator_ != nullptr) coordinator_->Shutdown();
  log_relay_.Shutdown();
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  exposer_.reset();
}

}  // namespace herd::coordinator
