// herd-coordinator: parses flags, starts the server, writes the ready file and
// serves until SIGTERM/SIGINT; SIGHUP rereads the auth file.
#include <glog/logging.h>
#include <signal.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <iostream>

#include "common/leader_channel.h"
#include "common/version.h"
#include "coordinator/ready_file.h"
#include "coordinator/server.h"

namespace {

std::atomic<bool> leadership_lost{false};

// Blocks the stop signals (and SIGHUP) in this thread and every thread
// started after it, so that sigwait receives them instead of a handler.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Serves SIGHUPs (reloading the auth file) until a stop signal comes.
int WaitForStopSignal(const sigset_t& signals, herd::coordinator::CoordinatorServer& server) {
  while (true) {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    if (signal_number != SIGHUP) return signal_number;
    if (auto status = server.ReloadAuth(); status.ok()) {
      LOG(INFO) << "SIGHUP: auth file reloaded";
    } else {
      LOG(ERROR) << "SIGHUP: auth file not reloaded, the previous one stays in use: " << status;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t stop_signals = BlockStopSignals();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  herd::coordinator::ServerOptions options;
  bool insecure_no_auth = false;
  std::string ready_file;

  CLI::App app{"herd-coordinator: jobs, worker membership, rendezvous and the checkpoint catalog for herd"};
  app.add_option("--listen", options.listen, "host:port for the gRPC API (port 0 picks a free one)")
      ->capture_default_str();
  // CLI11 reads "--metrics-listen=" as a missing value and would swallow the
  // next argument; allowing zero values makes it mean "" (disabled).
  app.add_option("--metrics-listen", options.metrics_listen,
                 "host:port for Prometheus /metrics (default 127.0.0.1:7071; port 0 picks a free one; "
                 "empty disables)")
      ->expected(0, 1)
      ->default_str("");
  auto* state_dir_option = app.add_option(
      "--state-dir", options.store.state_dir,
      "folder for coordinator.db (created if missing): the same as --store=sqlite:DIR/coordinator.db");
  auto* store_option = app.add_option(
      "--store", options.store.store,
      "where the state is kept: sqlite:PATH (a database file; one coordinator per file), or "
      "etcd://HOST:PORT[,HOST:PORT...] (etcd's v3 API; coordinators sharing --etcd-prefix elect one leader, "
      "the others wait as standbys and take over when its lease ends; over TLS with --etcd-cacert; see "
      "docs/design.md)");
  state_dir_option->excludes(store_option);
  app.add_option("--advertise", options.advertise,
                 "with --store=etcd://: HOST:PORT that workers, trainers and the CLI reach this coordinator at; "
                 "standbys name it to callers while this one leads (default: the --listen address with its bound "
                 "port, the host's name for a wildcard host)");
  app.add_option("--etcd-prefix", options.store.etcd_prefix,
                 "with --store=etcd://: the key prefix of this coordinator's state and its leader key")
      ->capture_default_str();
  app.add_option("--etcd-lease-seconds", options.store.etcd_lease_seconds,
                 "with --store=etcd://: the leader's lease; a standby takes over this long after the leader is "
                 "lost (at least 2)")
      ->capture_default_str()
      ->check(CLI::Range(2, 3600));
  // TLS to etcd is on when any of these is given (as etcdctl's --cacert,
  // --cert, --key): an etcd:// endpoint list stays the same either way.
  app.add_option("--etcd-cacert", options.store.etcd_tls.ca_file,
                 "with --store=etcd://: CA (PEM) that etcd's server certificates chain to; reaches etcd over TLS "
                 "(default: the system's CAs when only --etcd-cert/--etcd-key are given)");
  auto* etcd_cert_option = app.add_option(
      "--etcd-cert", options.store.etcd_tls.cert_file,
      "with --store=etcd://: client certificate (PEM) for etcd's --client-cert-auth (mutual TLS); needs --etcd-key");
  auto* etcd_key_option = app.add_option("--etcd-key", options.store.etcd_tls.key_file,
                                         "with --store=etcd://: the private key (PEM) of --etcd-cert");
  etcd_cert_option->needs(etcd_key_option);
  etcd_key_option->needs(etcd_cert_option);
  // etcd's user/password authentication. The password only ever comes from
  // a file: on the command line, ps would show it.
  auto* etcd_user_option = app.add_option(
      "--etcd-user", options.store.etcd_user,
      "with --store=etcd://: the etcd user to authenticate as (etcd's auth enabled); its role needs readwrite on "
      "--etcd-prefix; needs --etcd-password-file");
  auto* etcd_password_option = app.add_option(
      "--etcd-password-file", options.store.etcd_password_file,
      "with --store=etcd://: file holding --etcd-user's password (one trailing line break ignored; only its owner "
      "may read it, or a Secret volume's group)");
  etcd_user_option->needs(etcd_password_option);
  etcd_password_option->needs(etcd_user_option);
  auto* auth_option = app.add_option(
      "--auth-file", options.auth_file,
      "principals, roles and credentials (token SHA-256s, client certificate identities); only its owner may "
      "read it; SIGHUP rereads it (see docs/security.md)");
  auto* insecure_option = app.add_flag("--insecure-no-auth", insecure_no_auth,
                                       "accept RPCs without credentials, every caller an admin (local demos only)");
  auth_option->excludes(insecure_option);
  app.add_option("--max-pending-jobs-per-user", options.coordinator.max_pending_jobs_per_owner,
                 "jobs one principal may have pending at once; one more is refused (0: no cap)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-max-generation-bytes", options.coordinator.kv_limits.max_bytes_per_generation,
                 "bytes (keys plus values) one job generation may keep in the rendezvous key-value store")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-max-total-bytes", options.coordinator.kv_limits.max_bytes_total,
                 "bytes the rendezvous key-value store may keep over all jobs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-rpc-threads", options.max_rpc_threads,
                 "threads gRPC may use for synchronous calls (0: no cap); rendezvous waits, open "
                 "log request and job watch streams and log readers use none")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--lease-seconds", options.coordinator.lease_seconds, "a worker silent for this long is dead")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--min-workers-wait-seconds", options.coordinator.min_workers_wait_seconds,
                 "a running job with fewer than min_workers available waits this long for workers, then fails")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--tls-cert", options.tls.cert_file, "server certificate (PEM); enables TLS");
  app.add_option("--tls-key", options.tls.key_file, "server private key (PEM)");
  app.add_option("--tls-ca", options.tls.ca_file, "CA (PEM) that client certificates must chain to");
  app.add_flag("--tls-require-client-cert", options.tls.require_client_cert, "require mutual TLS");
  app.add_option("--ready-file", ready_file,
                 "once serving, write {\"listen\": ADDR, \"metrics\": ADDR, \"leading\": true} here (atomically); "
                 "with --store=etcd:// a standby writes it with \"leading\": false as soon as it answers");
  app.set_version_flag("--version", std::string("herd-coordinator ") + herd::kVersion);
  CLI11_PARSE(app, argc, argv);

  if (!options.advertise.empty()) {
    auto advertised = herd::ParseCoordinatorAddresses(options.advertise);
    if (!advertised.ok() || advertised->size() != 1) {
      std::cerr << "herd-coordinator: --advertise: \"" << options.advertise << "\" is not one HOST:PORT\n";
      return 2;
    }
  }
  if (options.store.state_dir.empty() && options.store.store.empty()) {
    std::cerr << "herd-coordinator: one of --state-dir or --store is required\n";
    return 2;
  }
  // A coordinator that lost its etcd leadership stops: its writes are
  // refused anyway, and its supervisor restarts it as a standby.
  options.store.on_leadership_lost = [] {
    leadership_lost = true;
    kill(getpid(), SIGTERM);
  };
  if (options.auth_file.empty() == !insecure_no_auth) {
    std::cerr << "herd-coordinator: exactly one of --auth-file or --insecure-no-auth is required\n";
    return 2;
  }
  if (insecure_no_auth) {
    LOG(WARNING) << "authentication is disabled (--insecure-no-auth): anyone who can reach the port controls jobs";
  }

  // A standby answers "not the leader" before it leads: say where.
  options.on_standby = [&ready_file](const std::string& listen) {
    LOG(INFO) << "herd-coordinator: standby, answering on " << listen << " with the leader's address";
    if (ready_file.empty()) return;
    if (auto status = herd::coordinator::WriteReadyFile(ready_file, listen, "", /*leading=*/false); !status.ok()) {
      LOG(ERROR) << status;
    }
  };
  auto server = herd::coordinator::CoordinatorServer::Start(options);
  if (!server.ok()) {
    LOG(ERROR) << "herd-coordinator: " << server.status();
    return 1;
  }
  const std::string& metrics = (*server)->metrics_address();
  LOG(INFO) << "herd-coordinator serving on " << (*server)->listen_address() << " (metrics "
            << (metrics.empty() ? "disabled" : metrics) << ")";
  if (!ready_file.empty()) {
    if (auto status = herd::coordinator::WriteReadyFile(ready_file, (*server)->listen_address(), metrics);
        !status.ok()) {
      LOG(ERROR) << status;
      return 1;
    }
  }

  int signal_number = WaitForStopSignal(stop_signals, **server);
  LOG(INFO) << "herd-coordinator: signal " << signal_number << ", shutting down";
  (*server)->Shutdown();
  if (leadership_lost) {
    LOG(ERROR) << "herd-coordinator: exiting: lost the etcd leadership";
    return 3;
  }
  return 0;
}
