// GetJobLogs' stream: a trainer's log relayed from its worker's upload as it
// comes, until the upload ends (its status), the reader leaves (CANCELLED)
// or the server stops (UNAVAILABLE). Waiting for the next lines of a
// followed log, it holds no thread.
#pragma once

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "coordinator/event_stream.h"
#include "coordinator/log_relay.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

class LogReadStream final : public EventStream<v1::LogChunk> {
 public:
  static std::shared_ptr<LogReadStream> Open(LogRelay* relay, Metrics::OpenStreamCount open);

  LogReadStream(LogRelay* relay, Metrics::OpenStreamCount open)
      : EventStream("the log reader cancelled", "the log reader went away", std::move(open)), relay_(relay) {}

  // Relays `session`'s chunks, the first naming `worker`; closes the session
  // once the call is over.
  void Relay(std::shared_ptr<LogSession> session, std::string worker);

 private:
  // Hands the session's next chunk or end over while no chunk is being
  // written: one chunk at a time leaves the rest in the session, whose
  // bounded buffer slows the uploader. Any thread may call it; a call made
  // while another runs makes that one look again.
  void Pump();
  void Written() override;
  void Detached() override;

  LogRelay* const relay_;
  std::weak_ptr<LogReadStream> weak_self_;
  absl::Mutex mu_;
  std::shared_ptr<LogSession> session_ ABSL_GUARDED_BY(mu_);
  std::string worker_ ABSL_GUARDED_BY(mu_);
  bool named_ ABSL_GUARDED_BY(mu_) = false;      // a chunk named the worker
  bool writing_ ABSL_GUARDED_BY(mu_) = false;    // a chunk is handed over, not yet written
  bool ended_ ABSL_GUARDED_BY(mu_) = false;      // the session's end is handed over
  bool detached_ ABSL_GUARDED_BY(mu_) = false;   // the call is over
  bool pumping_ ABSL_GUARDED_BY(mu_) = false;
  bool pump_again_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace herd::coordinator
