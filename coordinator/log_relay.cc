#include "coordinator/log_relay.h"

#include "absl/strings/str_cat.h"

namespace herd::coordinator {
namespace {

std::string SessionId(uint64_t number) { return absl::StrCat("log-", number); }

constexpr char kShuttingDown[] = "coordinator is shutting down";

absl::Status NotAnswered(const std::string& worker_id) {
  return absl::DeadlineExceededError(
      absl::StrCat("worker ", worker_id, " did not answer the request (its daemon is not reachable)"));
}

}  // namespace

void LogSession::Finish(absl::Status status) { End(std::move(status)); }

LogSession::Space LogSession::Room() {
  absl::MutexLock lock(&mu_);
  Space space;
  if (end_) {
    space.closed = end_;
  } else if (abandoned_) {
    space.closed = absl::CancelledError("the log reader went away");
  } else {
    space.room = !Full();
  }
  return space;
}

void LogSession::Add(std::string data) {
  {
    absl::MutexLock lock(&mu_);
    if (abandoned_ || end_) return;
    buffered_bytes_ += data.size();
    chunks_.push_back(std::move(data));
  }
  Wake();
}

void LogSession::OnRoom(std::function<void()> room) {
  {
    absl::MutexLock lock(&mu_);
    room_ = room;
  }
  if (room) room();
}

void LogSession::WakeUploader() {
  std::function<void()> room;
  {
    absl::MutexLock lock(&mu_);
    room = room_;
  }
  if (room) room();
}

void LogSession::End(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (end_) return;
    end_ = std::move(status);
  }
  Wake();
  WakeUploader();
}

void LogSession::ExpireAttach() {
  {
    absl::MutexLock lock(&mu_);
    if (attached_) return;
  }
  End(NotAnswered(worker_id_));
}

LogSession::Item LogSession::Take() {
  Item item;
  if (!chunks_.empty()) {
    buffered_bytes_ -= chunks_.front().size();
    item.data = std::move(chunks_.front());
    chunks_.pop_front();
  } else if (end_) {
    item.end = end_;
  }
  return item;
}

LogSession::Item LogSession::Next(absl::Duration wait) {
  {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !chunks_.empty() || end_.has_value(); };
    // The relay's attach timer ends a session no daemon attached to.
    mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
  }
  return TryNext();
}

LogSession::Item LogSession::TryNext() {
  Item item;
  bool freed;
  {
    absl::MutexLock lock(&mu_);
    const bool full = Full();
    item = Take();
    freed = full && !Full();
  }
  if (freed) WakeUploader();
  return item;
}

void LogSession::OnReady(std::function<void()> ready) {
  {
    absl::MutexLock lock(&mu_);
    ready_ = ready;
  }
  if (ready) ready();
}

void LogSession::Wake() {
  std::function<void()> ready;
  {
    absl::MutexLock lock(&mu_);
    ready = ready_;
  }
  if (ready) ready();
}

void LogSession::Abandon() {
  {
    absl::MutexLock lock(&mu_);
    abandoned_ = true;
    ready_ = nullptr;
  }
  WakeUploader();  // its upload ends: the daemon stops
}

absl::Status LogRelay::Listen(const std::string& worker_id, std::shared_ptr<LogRequestSink> sink) {
  std::shared_ptr<LogRequestSink> replaced;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return absl::UnavailableError(kShuttingDown);
    std::shared_ptr<LogRequestSink>& listener = listeners_[worker_id];
    replaced = std::move(listener);
    listener = std::move(sink);
  }
  if (replaced != nullptr) replaced->End(absl::OkStatus());
  return absl::OkStatus();
}

void LogRelay::StopListening(const std::string& worker_id, const LogRequestSink* sink) {
  absl::MutexLock lock(&mu_);
  auto it = listeners_.find(worker_id);
  if (it != listeners_.end() && it->second.get() == sink) listeners_.erase(it);
}

bool LogRelay::AwaitListeners(size_t count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return listeners_.size() == count; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

void LogRelay::Shutdown() {
  std::map<std::string, std::shared_ptr<LogRequestSink>> ended;
  std::map<std::string, std::shared_ptr<LogSession>> sessions;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    ended.swap(listeners_);
    sessions = sessions_;  // their readers close them as they end
  }
  for (auto& [worker, sink] : ended) sink->End(absl::UnavailableError(kShuttingDown));
  for (auto& [id, session] : sessions) session->End(absl::UnavailableError(kShuttingDown));
}

bool LogRelay::IsShutDown() {
  absl::MutexLock lock(&mu_);
  return shut_down_;
}

absl::StatusOr<std::shared_ptr<LogSession>> LogRelay::Open(const std::string& worker_id, v1::LogRequest request) {
  std::shared_ptr<LogRequestSink> sink;
  std::shared_ptr<LogSession> session;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return absl::UnavailableError(kShuttingDown);
    auto it = listeners_.find(worker_id);
    if (it == listeners_.end()) {
      return absl::UnavailableError(absl::StrCat(
          "worker ", worker_id, " has no request stream open to the coordinator (is its daemon running?)"));
    }
    sink = it->second;
    const int64_t number = next_number_++;
    std::string id = SessionId(number);
    session = std::shared_ptr<LogSession>(
        new LogSession(id, worker_id, options_.max_buffered_bytes));
    sessions_[id] = session;
    request.set_session(id);
    attach_deadlines_.Add(number, attach_deadlines_.DeadlineIn(options_.attach_timeout));
  }
  // A stream that ended meanwhile drops it: the reader's attach timeout
  // tells it, as for a daemon that never answers.
  sink->Send(std::move(request));
  return session;
}

void LogRelay::Close(const std::shared_ptr<LogSession>& session) {
  session->Abandon();
  absl::MutexLock lock(&mu_);
  sessions_.erase(session->id());
}

bool LogRelay::AwaitSessions(size_t count, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sessions_.size() == count; };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
}

void LogRelay::ExpireAttach(const std::vector<uint64_t>& due) {
  std::vector<std::shared_ptr<LogSession>> expired;
  {
    absl::MutexLock lock(&mu_);
    for (uint64_t number : due) {
      // One closed meanwhile needs nothing.
      if (auto it = sessions_.find(SessionId(number)); it != sessions_.end()) expired.push_back(it->second);
    }
  }
  for (const auto& session : expired) session->ExpireAttach();
}

absl::StatusOr<std::shared_ptr<LogSession>> LogRelay::Attach(const std::string& session_id,
                                                            const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return absl::NotFoundError(absl::StrCat("no log session ", session_id));
  if (it->second->worker_id() != worker_id) {
    return absl::PermissionDeniedError(
        absl::StrCat("log session ", session_id, " asked worker ", it->second->worker_id(), ", not ", worker_id));
  }
  {
    absl::MutexLock session_lock(&it->second->mu_);
    if (it->second->attached_) return absl::AlreadyExistsError(absl::StrCat("log session ", session_id, " is taken"));
    it->second->attached_ = true;
  }
  return it->second;
}

}  // namespace herd::coordinator
