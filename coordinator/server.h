// Assembles a serving coordinator: state database, Coordinator, both gRPC
// services on one port, and the Prometheus /metrics endpoint.
#pragma once

#include <grpcpp/server.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/clock.h"
#include "common/exclusive_lock.h"
#include "common/rpc_options.h"
#include "coordinator/cluster_service.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_service.h"
#include "coordinator/metrics.h"
#include "coordinator/rpc_edge.h"
#include "coordinator/store_opening.h"

namespace herd::coordinator {

struct ServerOptions {
  std::string listen = "127.0.0.1:7070";          // port 0 picks a free one
  std::string metrics_listen = "127.0.0.1:7071";  // empty: no /metrics endpoint
  // Where the state is kept: store.state_dir (coordinator.db, created if
  // missing) or store.store (--store: sqlite:PATH or etcd://...).
  StoreOptions store;
  // Principals, roles and credentials (coordinator/auth_file.h); empty:
  // auth disabled (--insecure-no-auth), every caller is an admin.
  std::string auth_file;
  TlsOptions tls;
  // The address clients reach this coordinator at, kept in etcd's leader
  // key for followers to name; "": the listen address with its bound port,
  // the host's name standing in for a wildcard host (0.0.0.0, [::]).
  std::string advertise;
  // etcd: called once this coordinator knows it is a standby (another leads,
  // or etcd does not answer), with the address it answers on.
  std::function<void(const std::string& listen_address)> on_standby;
  // Threads gRPC may run synchronous calls on (grpc::ResourceQuota); 0: no
  // cap. Calls that wait for others (JoinGeneration, KvGet) and the streams
  // that wait for events (WatchLogRequests, WatchJob, GetJobLogs, a followed
  // log's UploadLog) are callbacks and hold none while they wait, so a cap
  // bounds the threads without starving heartbeats behind a rendezvous, the
  // daemons' open streams or people following logs.
  int max_rpc_threads = 0;
  CoordinatorOptions coordinator;
  JobServiceOptions job_service;
  // How long a log reader waits for the worker's daemon, and how much of a
  // log the coordinator buffers per reader.
  LogRelayOptions log_relay;
  const Clock* clock = nullptr;  // nullptr: the system clock
  // Tests: wraps the opened store (one whose writes the test holds).
  std::function<std::unique_ptr<StateStore>(std::unique_ptr<StateStore>)> wrap_store;
};

class CoordinatorServer {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(const ServerOptions& options);
  ~CoordinatorServer();

  // host:port actually bound (the real port when 0 was asked for).
  const std::string& listen_address() const { return listen_address_; }
  // "" when the metrics endpoint is disabled.
  const std::string& metrics_address() const { return metrics_address_; }
  Coordinator& coordinator() { return *coordinator_; }
  LogRelay& log_relay() { return log_relay_; }

  // Rereads the auth file (SIGHUP); on error the loaded one stays in use.
  absl::Status ReloadAuth();

  // Ends waiting calls, stops serving and writes unsaved progress. Idempotent.
  void Shutdown();

 private:
  explicit CoordinatorServer(const LogRelayOptions& log_relay) : log_relay_(log_relay) {}

  SystemClock system_clock_;
  // Held while serving: released by the kernel if this process dies.
  std::unique_ptr<ExclusiveLock> state_dir_lock_;
  // etcd: held while serving, given up (resigned) after the coordinator's
  // last write.
  std::unique_ptr<EtcdLeadership> leadership_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<RpcEdge> edge_;
  LogRelay log_relay_;
  std::unique_ptr<JobServiceImpl> job_service_;
  std::unique_ptr<ClusterServiceImpl> cluster_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string listen_address_;
  std::string metrics_address_;
};

// `address` with its port replaced by `port` ("0.0.0.0:0", 7070 -> "0.0.0.0:7070").
std::string WithPort(const std::string& address, int port);

// `listen` (with its bound port) as others can reach it: a wildcard host
// (0.0.0.0, [::], ::, empty) becomes `hostname`.
std::string AdvertisedAddress(const std::string& listen, const std::string& hostname);

}  // namespace herd::coordinator
