#include "coordinator/log_read_stream.h"

#include <optional>
#include <utility>

namespace herd::coordinator {

std::shared_ptr<LogReadStream> LogReadStream::Open(LogRelay* relay, Metrics::OpenStreamCount open) {
  std::shared_ptr<LogReadStream> stream = EventStream::Open<LogReadStream>(relay, std::move(open));
  stream->weak_self_ = stream;
  return stream;
}

void LogReadStream::Relay(std::shared_ptr<LogSession> session, std::string worker) {
  bool gone;
  {
    absl::MutexLock lock(&mu_);
    gone = detached_;
    if (!gone) {
      session_ = session;
      worker_ = std::move(worker);
    }
  }
  if (gone) {  // the reader left before the session opened
    relay_->Close(session);
    return;
  }
  // The uploader's thread wakes the stream; a stream gone meanwhile is not
  // woken.
  session->OnReady([weak = weak_self_] {
    if (std::shared_ptr<LogReadStream> stream = weak.lock()) stream->Pump();
  });
}

void LogReadStream::Pump() {
  std::shared_ptr<LogReadStream> keep = weak_self_.lock();  // End may finish the call
  if (keep == nullptr) return;
  {
    absl::MutexLock lock(&mu_);
    if (pumping_) {
      pump_again_ = true;
      return;
    }
    pumping_ = true;
  }
  while (true) {
    std::shared_ptr<LogSession> session;
    {
      absl::MutexLock lock(&mu_);
      pump_again_ = false;
      if (session_ != nullptr && !writing_ && !ended_ && !detached_) session = session_;
    }
    std::optional<v1::LogChunk> chunk;
    std::optional<absl::Status> end;
    if (session != nullptr) {
      // Not under the lock: taking a chunk wakes an uploader waiting for
      // room, whose reactions may run at once and wake this stream again.
      // Only this loop hands chunks over, so writing_ and ended_ still hold.
      LogSession::Item item = session->TryNext();
      absl::MutexLock lock(&mu_);
      if (item.data) {
        chunk.emplace();
        chunk->set_data(*std::move(item.data));
        if (!named_) chunk->set_worker_id(worker_);
        named_ = true;
        writing_ = true;
      } else if (item.end) {
        end = std::move(item.end);
        ended_ = true;
      }
    }
    // Send and End may run the stream's reactions at once (Written, which
    // pumps: it only asks this loop to look again).
    if (chunk) Send(*std::move(chunk));
    if (end) End(*end);
    absl::MutexLock lock(&mu_);
    if (!pump_again_) {
      pumping_ = false;
      return;
    }
  }
}

void LogReadStream::Written() {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
  }
  Pump();
}

void LogReadStream::Detached() {
  std::shared_ptr<LogSession> session;
  {
    absl::MutexLock lock(&mu_);
    detached_ = true;
    session = std::move(session_);
  }
  if (session != nullptr) relay_->Close(session);
}

}  // namespace herd::coordinator
