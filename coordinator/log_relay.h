// Carries trainer logs from worker daemons to the people reading them
// (GetJobLogs), without the coordinator ever connecting to a worker: each
// daemon listens on a WatchLogRequests stream, a reader opens a session that
// is sent to the daemon as a LogRequest, and the daemon's UploadLog stream
// attaches to the session and pushes the log through it. A session buffers a
// bounded amount, so a slow reader slows the upload instead of growing the
// coordinator's memory.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

class LogRelay;

// One reader's log: the uploader pushes, the reader pops.
class LogSession {
 public:
  // What the reader gets from one Next call.
  struct Item {
    std::optional<std::string> data;  // a chunk, when one was waiting
    // Set once the upload ended (OK: the whole log was sent) or failed; the
    // reader gets it after every chunk before it.
    std::optional<absl::Status> end;
  };

  // Uploader side. False (and the data dropped) once the reader has left.
  // Blocks while `max_buffered_bytes` are waiting for the reader.
  bool Push(std::string data);
  void Finish(absl::Status status);
  // Reader side. Waits up to `wait` for a chunk or the end; an empty Item
  // when neither came. DEADLINE_EXCEEDED as the end when no daemon attached
  // within the attach timeout.
  Item Next(absl::Duration wait);
  // The reader left: the uploader's next Push returns false.
  void Abandon();
  const std::string& id() const { return id_; }
  const std::string& worker_id() const { return worker_id_; }

 private:
  friend class LogRelay;
  LogSession(std::string id, std::string worker_id, size_t max_buffered_bytes, absl::Time attach_deadline)
      : id_(std::move(id)), worker_id_(std::move(worker_id)), max_buffered_bytes_(max_buffered_bytes),
        attach_deadline_(attach_deadline) {}

  const std::string id_;
  const std::string worker_id_;
  const size_t max_buffered_bytes_;
  const absl::Time attach_deadline_;
  absl::Mutex mu_;
  std::deque<std::string> chunks_ ABSL_GUARDED_BY(mu_);
  size_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
};

struct LogRelayOptions {
  // How long a reader waits for the worker's daemon to answer its request.
  absl::Duration attach_timeout = absl::Seconds(10);
  size_t max_buffered_bytes = 1 << 20;
};

class LogRelay {
 public:
  explicit LogRelay(LogRelayOptions options = {}) : options_(options) {}

  // ---- daemon side (WatchLogRequests)
  // Registers the stream of `worker_id` and returns its generation number; a
  // newer stream of the same worker replaces it.
  int64_t Listen(const std::string& worker_id);
  // The next request for that stream, waiting up to `wait`; nullopt when none
  // came or the stream was replaced (see Listening).
  std::optional<v1::LogRequest> NextRequest(const std::string& worker_id, int64_t listener, absl::Duration wait);
  bool Listening(const std::string& worker_id, int64_t listener);
  void StopListening(const std::string& worker_id, int64_t listener);

  // ---- reader side (GetJobLogs)
  // UNAVAILABLE when the worker's daemon has no request stream open.
  absl::StatusOr<std::shared_ptr<LogSession>> Open(const std::string& worker_id, v1::LogRequest request);
  // The reader is done with the session (it ended or the reader left).
  void Close(const std::shared_ptr<LogSession>& session);

  // ---- daemon side (UploadLog)
  // NOT_FOUND for an unknown or closed session, PERMISSION_DENIED when the
  // session asked another worker.
  absl::StatusOr<std::shared_ptr<LogSession>> Attach(const std::string& session_id, const std::string& worker_id);

 private:
  struct Listener {
    int64_t number = 0;
    std::deque<v1::LogRequest> requests;
  };

  const LogRelayOptions options_;
  absl::Mutex mu_;
  int64_t next_number_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Listener> listeners_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<LogSession>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace herd::coordinator
