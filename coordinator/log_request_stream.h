// WatchLogRequests' stream: one worker daemon's LogRequestSink, open until
// the daemon leaves, a newer stream of the worker takes over, or the server
// stops. Waiting for a reader's request, it holds no thread.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "coordinator/event_stream.h"
#include "coordinator/log_relay.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

class LogRequestStream final : public EventStream<v1::LogRequest>, public LogRequestSink {
 public:
  static std::shared_ptr<LogRequestStream> Open(LogRelay* relay, std::string worker_id,
                                                Metrics::OpenStreamCount open) {
    return EventStream::Open<LogRequestStream>(relay, std::move(worker_id), std::move(open));
  }

  LogRequestStream(LogRelay* relay, std::string worker_id, Metrics::OpenStreamCount open)
      : EventStream("the worker left", "the worker's log stream broke", std::move(open)),
        relay_(relay),
        worker_id_(std::move(worker_id)) {}

  void Send(v1::LogRequest request) override { EventStream::Send(std::move(request)); }
  void End(const absl::Status& status) override { EventStream::End(status); }

 private:
  void Detached() override { relay_->StopListening(worker_id_, this); }

  LogRelay* const relay_;
  const std::string worker_id_;
};

}  // namespace herd::coordinator
