#include "coordinator/log_upload_stream.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace herd::coordinator {

std::shared_ptr<LogUploadStream> LogUploadStream::Open(LogRelay* relay, const grpc::CallbackServerContext* context,
                                                       Metrics::OpenStreamCount open) {
  auto stream = std::make_shared<LogUploadStream>(relay, context, std::move(open));
  stream->self_ = stream;
  stream->weak_self_ = stream;
  return stream;
}

void LogUploadStream::Begin(RpcEdge::Answer answer, CheckWorker check) {
  {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
    check_ = std::move(check);
    reading_ = true;
  }
  StartRead(&message_);
}

void LogUploadStream::OnReadDone(bool ok) {
  std::shared_ptr<LogSession> session;
  {
    absl::MutexLock lock(&mu_);
    reading_ = false;
    if (ended_) return;
    session = session_;
  }
  if (!ok) {
    // The daemon is done (OK: the whole log was sent), or it went.
    if (context_->IsCancelled()) {
      BrokeOff();
    } else if (session == nullptr) {
      End(absl::InvalidArgumentError("UploadLog: the stream carried no session"));
    } else {
      End(absl::OkStatus(), absl::OkStatus());
    }
    return;
  }
  if (session == nullptr) {
    Attach();
    return;
  }
  Take(std::move(session));
  Resume();
}

void LogUploadStream::Attach() {
  if (absl::Status status = check_(message_.worker_id()); !status.ok()) {
    End(status);
    return;
  }
  absl::StatusOr<std::shared_ptr<LogSession>> session = relay_->Attach(message_.session(), message_.worker_id());
  if (!session.ok()) {
    End(session.status());
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    session_ = *session;
  }
  Take(*session);
  // The reader's thread wakes the upload when it takes a chunk or leaves; an
  // upload gone meanwhile is not woken.
  (*session)->OnRoom([weak = weak_self_] {
    if (std::shared_ptr<LogUploadStream> stream = weak.lock()) stream->Resume();
  });
}

void LogUploadStream::Take(std::shared_ptr<LogSession> session) {
  if (!message_.error().empty()) {  // the daemon could not read the log
    End(absl::OkStatus(), absl::NotFoundError(message_.error()));
    return;
  }
  // Dropped once the session closed: Resume then ends the upload.
  if (!message_.data().empty()) session->Add(std::move(*message_.mutable_data()));
}

void LogUploadStream::Resume() {
  std::shared_ptr<LogUploadStream> keep = weak_self_.lock();  // End may finish the call
  if (keep == nullptr) return;
  std::optional<absl::Status> closed;
  {
    absl::MutexLock lock(&mu_);
    if (ended_ || session_ == nullptr) return;
    LogSession::Space space = session_->Room();
    if (space.closed) {
      closed = std::move(space.closed);
    } else if (reading_ || !space.room) {
      return;
    } else {
      reading_ = true;
    }
  }
  // A read still out when the call ends completes not ok, after Finish.
  if (closed) {
    End(*closed);
  } else {
    StartRead(&message_);
  }
}

void LogUploadStream::End(const absl::Status& status, std::optional<absl::Status> session_end) {
  RpcEdge::Answer answer;
  std::shared_ptr<LogSession> session;
  {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    answer = std::move(answer_);
    session = session_;
  }
  // The session wakes this upload as it ends: ended_ is set, so it stays.
  if (session_end && session != nullptr) session->Finish(*std::move(session_end));
  if (answer) answer(status);
}

void LogUploadStream::BrokeOff() {
  std::shared_ptr<LogSession> session;
  {
    absl::MutexLock lock(&mu_);
    session = session_;
  }
  std::optional<absl::Status> session_end;
  if (session != nullptr) {
    session_end = absl::UnavailableError(absl::StrCat("worker ", session->worker_id(), "'s log upload broke off"));
  }
  End(absl::CancelledError("the upload broke off"), std::move(session_end));
}

void LogUploadStream::OnCancel() { BrokeOff(); }

void LogUploadStream::OnDone() {
  std::shared_ptr<LogUploadStream> last = std::move(self_);  // may free the stream as it returns
  std::shared_ptr<LogSession> session;
  {
    absl::MutexLock lock(&mu_);
    ended_ = true;
    session = std::move(session_);
  }
  if (session != nullptr) session->OnRoom(nullptr);
  open_.Close();
}

}  // namespace herd::coordinator
