// herd-coordinator: parses flags, starts the server, writes the ready file and
// serves until SIGTERM/SIGINT.
#include <glog/logging.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "common/auth.h"
#include "common/version.h"
#include "coordinator/ready_file.h"
#include "coordinator/server.h"

namespace {

// Blocks the stop signals in this thread and every thread started after it,
// so that WaitForStopSignal receives them instead of a handler.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int WaitForStopSignal(const sigset_t& signals) {
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t stop_signals = BlockStopSignals();
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  herd::coordinator::ServerOptions options;
  std::string token_file;
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
  app.add_option("--state-dir", options.state_dir, "folder for coordinator.db (created if missing)")->required();
  auto* token_option = app.add_option("--token-file", token_file, "file holding the bearer token every RPC must carry");
  auto* insecure_option =
      app.add_flag("--insecure-no-auth", insecure_no_auth, "accept RPCs without a token (local demos only)");
  token_option->excludes(insecure_option);
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
                 "once serving, write {\"listen\": ADDR, \"metrics\": ADDR} here (atomically)");
  app.set_version_flag("--version", std::string("herd-coordinator ") + herd::kVersion);
  CLI11_PARSE(app, argc, argv);

  if (token_file.empty() == !insecure_no_auth) {
    std::cerr << "herd-coordinator: exactly one of --token-file or --insecure-no-auth is required\n";
    return 2;
  }
  if (!token_file.empty()) {
    auto token = herd::ReadTokenFile(token_file);
    if (!token.ok()) {
      std::cerr << "herd-coordinator: " << token.status().message() << "\n";
      return 2;
    }
    options.token = *token;
  } else {
    LOG(WARNING) << "authentication is disabled (--insecure-no-auth): anyone who can reach the port controls jobs";
  }

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

  int signal_number = WaitForStopSignal(stop_signals);
  LOG(INFO) << "herd-coordinator: signal " << signal_number << ", shutting down";
  (*server)->Shutdown();
  return 0;
}
