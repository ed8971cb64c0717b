// Carries trainer logs from worker daemons to the people reading them
// (GetJobLogs), without the coordinator ever connecting to a worker: each
// daemon listens on a WatchLogRequests stream (a LogRequestSink), a reader opens a session that
// is sent to the daemon as a LogRequest, and the daemon's UploadLog stream
// attaches to the session and pushes the log through it. A session buffers a
// bounded amount, so a slow reader slows the upload instead of growing the
// coordinator's memory. A reader either waits in Next (a thread each) or is
// woken when there is something to take (OnReady, TryNext: none); an
// uploader is woken when there is room (OnRoom, Room, Add) and holds no
// thread either.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/deadline_timer.h"
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

  // Uploader side. The upload's end (OK: the whole log was sent).
  void Finish(absl::Status status);
  // Whether the session takes a chunk
  // now: `room` (false: wait for OnRoom), or the status the upload ends
  // with because it never will: CANCELLED once the reader left, the
  // session's end once it ended otherwise (the relay shut down).
  struct Space {
    bool room = false;
    std::optional<absl::Status> closed;
  };
  Space Room();
  // Takes `data` even when it overfills the buffer (one chunk at most: an
  // uploader asks Room before reading more). Dropped once the reader left
  // or the session ended (no daemon attached in time, the relay shut down).
  void Add(std::string data);
  // `room` runs whenever room may have freed or the session closed: at once,
  // then on the thread that took a chunk, ended or abandoned the session,
  // never under the session's lock. The uploader then asks Room.
  void OnRoom(std::function<void()> room);
  // Reader side. Waits up to `wait` for a chunk or the end; an empty Item
  // when neither came. DEADLINE_EXCEEDED as the end when no daemon attached
  // within the attach timeout.
  Item Next(absl::Duration wait);
  // The same without waiting: an empty Item when nothing is there yet.
  Item TryNext();
  // `ready` runs whenever a chunk or the end may have come: at once, then
  // on the thread that pushed, finished or expired the session, never under
  // the session's lock. The reader then takes what is there with TryNext.
  void OnReady(std::function<void()> ready);
  // The reader left: the uploader, woken through OnRoom, finds the session
  // closed.
  void Abandon();
  const std::string& id() const { return id_; }
  const std::string& worker_id() const { return worker_id_; }

 private:
  friend class LogRelay;
  LogSession(std::string id, std::string worker_id, size_t max_buffered_bytes)
      : id_(std::move(id)), worker_id_(std::move(worker_id)), max_buffered_bytes_(max_buffered_bytes) {}
  // The next item, if one is there (TryNext).
  Item Take() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the end unless one is set, and wakes the reader.
  void End(absl::Status status);
  // The attach timeout passed: DEADLINE_EXCEEDED unless a daemon attached.
  void ExpireAttach();
  // Wakes a reader waiting through OnReady.
  void Wake();
  // Wakes an uploader waiting through OnRoom.
  void WakeUploader();
  bool Full() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return buffered_bytes_ >= max_buffered_bytes_; }

  const std::string id_;
  const std::string worker_id_;
  const size_t max_buffered_bytes_;
  absl::Mutex mu_;
  std::deque<std::string> chunks_ ABSL_GUARDED_BY(mu_);
  size_t buffered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  std::function<void()> ready_ ABSL_GUARDED_BY(mu_);
  std::function<void()> room_ ABSL_GUARDED_BY(mu_);
};

// Where a worker's log requests go: its daemon's open request stream. The
// relay calls it without holding its lock (a stream may end inside Send).
class LogRequestSink {
 public:
  virtual ~LogRequestSink() = default;
  virtual void Send(v1::LogRequest request) = 0;
  // The stream is no longer the worker's: OK when a newer one took over.
  virtual void End(const absl::Status& status) = 0;
};

struct LogRelayOptions {
  // How long a reader waits for the worker's daemon to answer its request.
  absl::Duration attach_timeout = absl::Seconds(10);
  size_t max_buffered_bytes = 1 << 20;
};

class LogRelay {
 public:
  explicit LogRelay(LogRelayOptions options = {})
      : options_(options), attach_deadlines_([this](std::vector<uint64_t> due) { ExpireAttach(due); }) {}

  // ---- daemon side (WatchLogRequests)
  // Makes `sink` the request stream of `worker_id`; a stream of the same
  // worker before it ends OK (the daemon reopened it). UNAVAILABLE once the
  // relay shut down.
  absl::Status Listen(const std::string& worker_id, std::shared_ptr<LogRequestSink> sink);
  // `sink` is gone; a newer stream of the worker stays.
  void StopListening(const std::string& worker_id, const LogRequestSink* sink);
  // True once exactly `count` request streams are open; false after
  // `timeout` (tests).
  bool AwaitListeners(size_t count, absl::Duration timeout);
  // Ends every request stream and every reader's session UNAVAILABLE and
  // refuses new ones: the server stops, and must not wait for daemons to
  // hang up or for followed logs to end.
  void Shutdown();
  // Whether Shutdown ran: a reader trying worker after worker stops.
  bool IsShutDown();

  // ---- reader side (GetJobLogs)
  // UNAVAILABLE when the worker's daemon has no request stream open.
  absl::StatusOr<std::shared_ptr<LogSession>> Open(const std::string& worker_id, v1::LogRequest request);
  // The reader is done with the session (it ended or the reader left).
  void Close(const std::shared_ptr<LogSession>& session);
  // True once exactly `count` sessions are open; false after `timeout`
  // (tests).
  bool AwaitSessions(size_t count, absl::Duration timeout);

  // ---- daemon side (UploadLog)
  // NOT_FOUND for an unknown or closed session, PERMISSION_DENIED when the
  // session asked another worker.
  absl::StatusOr<std::shared_ptr<LogSession>> Attach(const std::string& session_id, const std::string& worker_id);

 private:
  // Ends the sessions numbered `due` whose daemon has not attached (the
  // timer's thread).
  void ExpireAttach(const std::vector<uint64_t>& due);

  const LogRelayOptions options_;
  absl::Mutex mu_;
  int64_t next_number_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, std::shared_ptr<LogRequestSink>> listeners_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::shared_ptr<LogSession>> sessions_ ABSL_GUARDED_BY(mu_);
  // Wakes a reader that waits holding no thread when its attach timeout
  // passes (by session number). Last: it stops before the rest goes.
  DeadlineTimer attach_deadlines_;
};

}  // namespace herd::coordinator
