// Simulated worker daemons heartbeating a coordinator: each worker calls
// Heartbeat once per period, the workers' phases spread evenly over the
// period, as a fleet of independent daemons would. A few threads drive all of
// them with gRPC's async client API over a few shared channels.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "proto/herd.grpc.pb.h"

namespace herd::bench {

using SteadyClock = std::chrono::steady_clock;

// One finished heartbeat.
struct HeartbeatSample {
  double sent_s;     // when it was sent, seconds since the load started
  double latency_s;  // send to response
  double lag_s;      // how late it was sent against its schedule (client saturation)
  bool ok;           // OK status and no re-register request
};

struct HeartbeatLoadOptions {
  double period_s = 1.0;  // per worker
  int threads = 4;
  std::chrono::milliseconds deadline{5000};
};

class HeartbeatLoad {
 public:
  // `channels` are shared round-robin by the workers.
  HeartbeatLoad(std::vector<std::shared_ptr<grpc::Channel>> channels, std::vector<std::string> worker_ids,
                HeartbeatLoadOptions options);
  ~HeartbeatLoad();  // Stop()

  void Start();
  // Stops sending, waits for the calls in flight, and returns every sample.
  std::vector<HeartbeatSample> Stop();
  SteadyClock::time_point started() const { return started_; }

 private:
  void Drive(int thread);

  std::vector<std::unique_ptr<v1::ClusterService::Stub>> stubs_;
  std::vector<std::string> worker_ids_;
  HeartbeatLoadOptions options_;
  SteadyClock::time_point started_;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
  std::vector<std::vector<HeartbeatSample>> samples_;  // one list per thread
};

}  // namespace herd::bench
