// A server stream whose messages are events that happen elsewhere (a log
// request for a worker, a job's change): while it waits for the next one it
// holds no thread, so thousands may stay open on a server with few.
//
// The stream owns itself until gRPC is done with it (OnDone). A producer
// holds it by shared_ptr while handing it an event: gRPC may run the
// stream's reactions inside Send (a write that completes at once), even its
// OnDone, and the stream must outlive that call. Producers must therefore
// call Send and End without holding a lock that the stream's Detached takes.
// It counts as open (herd_coordinator_open_streams) until OnDone.
#pragma once

#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/metrics.h"
#include "coordinator/rpc_edge.h"

namespace herd::coordinator {

template <typename Event>
class EventStream : public grpc::ServerWriteReactor<Event> {
 public:
  // A stream owning itself until gRPC is done with it.
  template <typename Stream, typename... Args>
  static std::shared_ptr<Stream> Open(Args&&... args) {
    auto stream = std::make_shared<Stream>(std::forward<Args>(args)...);
    stream->self_ = stream;
    return stream;
  }

  // `cancelled` and `broken` are the CANCELLED messages for a caller that
  // left and for a write that failed; `open` counts the stream until OnDone.
  EventStream(std::string cancelled, std::string broken, Metrics::OpenStreamCount open)
      : cancelled_(std::move(cancelled)), broken_(std::move(broken)), open_(std::move(open)) {}

  // The call was accepted: End hands its status to `answer` (the edge's, so
  // the call is counted as every other).
  void Begin(RpcEdge::Answer answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }

  // Writes `event` after those sent before it; dropped once the stream ends.
  void Send(Event event) {
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return;
      queue_.push_back(std::move(event));
      if (writing_) return;
      writing_ = true;
      current_ = std::move(queue_.front());
      queue_.pop_front();
    }
    this->StartWrite(&current_);
  }

  // Ends the call with `status` once the events already sent are written.
  // Only the first End counts.
  void End(const absl::Status& status) {
    RpcEdge::Answer answer;
    {
      absl::MutexLock lock(&mu_);
      if (ended_) return;
      ended_ = true;
      answer = std::move(answer_);
    }
    if (answer) answer(status);
  }

  // The edge's `finish`: gRPC's Finish, deferred while a write is out (one
  // operation of each kind at a time).
  void FinishWhenWritten(grpc::Status status) {
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      finish_ = status;
      if (writing_) return;
    }
    this->Finish(std::move(status));
  }

  void OnWriteDone(bool ok) override {
    if (!ok) End(absl::CancelledError(broken_));
    bool more;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) queue_.clear();
      more = !queue_.empty();
      if (more) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
      } else {
        writing_ = false;
        finish = finish_;
      }
    }
    if (more) {
      this->StartWrite(&current_);
    } else if (finish) {
      this->Finish(*std::move(finish));
    } else if (ok) {
      Written();
    }
  }

  void OnCancel() override { End(absl::CancelledError(cancelled_)); }

  void OnDone() override {
    std::shared_ptr<EventStream> last = std::move(self_);  // may free the stream as it returns
    open_.Close();  // before Detached: whoever sees the stream gone sees it uncounted
    Detached();
  }

 protected:
  // The call is over: the producer must stop handing it events.
  virtual void Detached() {}
  // Every event sent so far is written: a producer that hands over one
  // event at a time (to bound what waits in memory) may send the next.
  virtual void Written() {}

 private:
  const std::string cancelled_;
  const std::string broken_;
  Metrics::OpenStreamCount open_;
  std::shared_ptr<EventStream> self_;
  absl::Mutex mu_;
  RpcEdge::Answer answer_ ABSL_GUARDED_BY(mu_);
  std::deque<Event> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Written only while no write is out, read by gRPC during one.
  Event current_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // The status to finish with once the write out is done.
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
};

}  // namespace herd::coordinator
