#include "worker/daemon/log_uplink.h"

#include <glog/logging.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/rpc_options.h"
#include "worker/daemon/backoff.h"
#include "worker/daemon/identifiers.h"
#include "worker/daemon/log_tail.h"
#include "worker/daemon/model_file_path.h"

namespace herd::worker {
namespace {

constexpr size_t kChunkBytes = 64 * 1024;
// Model files are large: fewer, bigger messages (well under the 16 MiB limit).
constexpr size_t kFileChunkBytes = 1 << 20;
// An upload with `follow` lasts as long as the trainer: no practical deadline.
constexpr std::chrono::hours kUploadDeadline{24 * 7};

// Where the asked log starts, or why it cannot be served.
absl::StatusOr<int64_t> StartOffset(const std::string& worker_id, const std::string& job_id,
                                    const std::string& path, int64_t tail_lines) {
  if (!IsValidJobId(job_id)) return absl::InvalidArgumentError(absl::StrCat("job id '", job_id, "' is not valid"));
  if (tail_lines > 0) {
    auto offset = TailOffset(path, tail_lines);
    if (absl::IsNotFound(offset.status())) {
      return absl::NotFoundError(absl::StrCat("worker ", worker_id, " has no log of job ", job_id));
    }
    return offset;
  }
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " has no log of job ", job_id));
  }
  return 0;
}

// One UploadLog call answering a LogRequest. Its first message names the
// session, which attaches it to the reader at once; then come an error or
// the data. Once a write fails the coordinator has gone: the rest is skipped.
class UploadStream {
 public:
  UploadStream(std::shared_ptr<grpc::ClientContext> call, const std::shared_ptr<grpc::Channel>& coordinator,
               const v1::LogRequest& request, const std::string& worker_id)
      : call_(std::move(call)),
        job_id_(request.job_id()),
        writer_(v1::ClusterService::NewStub(coordinator)->UploadLog(call_.get(), &response_)) {
    message_.set_session(request.session());
    message_.set_worker_id(worker_id);
    open_ = writer_->Write(message_);
  }

  bool open() const { return open_; }

  // Sent before any data: the reader gets `status`'s message instead.
  void SendError(const absl::Status& status) {
    if (!open_) return;
    message_.set_error(std::string(status.message()));
    open_ = writer_->Write(message_);
  }

  void SendData(const char* data, size_t bytes) {
    message_.Clear();
    message_.set_data(data, bytes);
    open_ = writer_->Write(message_);
  }

  // The reader gets an error rather than what was sent so far.
  void Cancel() {
    call_->TryCancel();
    open_ = false;
  }

  // Ends the call; how it failed, unless cancelled, goes to the verbose log
  // as the upload of `what` ("log", "model file").
  void Finish(const char* what) {
    if (open_) writer_->WritesDone();
    grpc::Status status = writer_->Finish();
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      VLOG(1) << what << " upload for " << job_id_ << ": " << status.error_message();
    }
  }

 private:
  const std::shared_ptr<grpc::ClientContext> call_;
  const std::string job_id_;
  v1::UploadLogResponse response_;
  const std::unique_ptr<grpc::ClientWriter<v1::UploadLogRequest>> writer_;
  v1::UploadLogRequest message_;
  bool open_ = false;
};

}  // namespace

LogUplink::LogUplink(LogUplinkOptions options, std::shared_ptr<LeaderChannel> coordinator)
    : options_(std::move(options)), coordinator_(std::move(coordinator)) {}

LogUplink::~LogUplink() {
  Stop();
  if (watcher_.joinable()) watcher_.join();
  std::vector<Upload> uploads;
  {
    absl::MutexLock lock(&mu_);
    uploads.swap(uploads_);
  }
  for (Upload& upload : uploads) upload.thread.join();
}

void LogUplink::Start() { watcher_ = std::thread([this] { WatchLoop(); }); }

void LogUplink::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  for (auto& weak : calls_) {
    if (auto call = weak.lock()) call->TryCancel();
  }
}

bool LogUplink::WaitUnlessStopping(std::chrono::milliseconds delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(delay));
  return !stopping_;
}

std::shared_ptr<grpc::ClientContext> LogUplink::NewContext(std::chrono::milliseconds timeout) {
  std::shared_ptr<grpc::ClientContext> call(NewCallContext(options_.token, timeout).release());
  absl::MutexLock lock(&mu_);
  if (stopping_) return nullptr;
  calls_.erase(std::remove_if(calls_.begin(), calls_.end(), [](const auto& weak) { return weak.expired(); }),
               calls_.end());
  calls_.push_back(call);
  return call;
}

void LogUplink::WatchLoop() {
  Backoff backoff(options_.min_backoff, options_.max_backoff);
  while (true) {
    auto call = NewContext(options_.stream_period);
    if (!call) return;
    v1::WatchLogRequestsRequest request;
    request.set_worker_id(options_.worker_id);
    const std::string address = coordinator_->current_address();
    auto stub = v1::ClusterService::NewStub(coordinator_->ChannelTo(address));
    auto reader = stub->WatchLogRequests(call.get(), request);
    v1::LogRequest ask;
    while (reader->Read(&ask)) {
      backoff.Reset();
      StartUpload(ask);
    }
    grpc::Status status = reader->Finish();
    // A follower's answer names the leader: the next stream goes there.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) coordinator_->Learn(address, status, *call);
    // The period's deadline ends a healthy stream: reopen at once.
    if (status.ok() || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      backoff.Reset();
      continue;
    }
    std::chrono::milliseconds delay = backoff.Next();
    if (status.error_code() != grpc::StatusCode::CANCELLED) {
      VLOG(1) << "log request stream: " << status.error_message() << "; again in " << delay.count() << " ms";
    }
    if (!WaitUnlessStopping(delay)) return;
  }
}

void LogUplink::StartUpload(v1::LogRequest request) {
  absl::MutexLock lock(&mu_);
  // Join the uploads that ended, so a long-lived daemon keeps no dead threads.
  for (auto it = uploads_.begin(); it != uploads_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = uploads_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  uploads_.push_back(Upload{std::thread([this, request = std::move(request), done] {
                              SendLog(request);
                              *done = true;
                            }),
                            done});
}

void LogUplink::SendLog(const v1::LogRequest& request) {
  if (!request.file().empty()) {
    SendFile(request);
    return;
  }
  auto call = NewContext(kUploadDeadline);
  if (!call) return;
  UploadStream upload(std::move(call), coordinator_->current(), request, options_.worker_id);
  const std::string path = options_.log_path(request.job_id());
  absl::StatusOr<int64_t> offset = StartOffset(options_.worker_id, request.job_id(), path, request.tail_lines());
  // Followed right after the job started, the trainer may not have been
  // started yet: wait a little for its log rather than fail.
  const auto give_up = std::chrono::steady_clock::now() + options_.log_wait;
  while (upload.open() && request.follow() && absl::IsNotFound(offset.status()) &&
         std::chrono::steady_clock::now() < give_up && WaitUnlessStopping(options_.follow_poll)) {
    offset = StartOffset(options_.worker_id, request.job_id(), path, request.tail_lines());
  }
  std::ifstream file;
  if (offset.ok()) {
    file.open(path, std::ios::binary);
    file.seekg(*offset);
    if (!file) offset = absl::InternalError(absl::StrCat("worker ", options_.worker_id, " cannot read ", path));
  }
  if (!offset.ok()) upload.SendError(offset.status());
  std::string chunk(kChunkBytes, '\0');
  bool saw_exit = false;  // the trainer had exited when the log last ran dry
  while (upload.open() && offset.ok()) {
    file.read(chunk.data(), chunk.size());
    std::streamsize got = file.gcount();
    if (got > 0) {
      upload.SendData(chunk.data(), static_cast<size_t>(got));
      continue;
    }
    file.clear();  // at the end for now: keep the position for what comes next
    // Without follow, or once one more read after the trainer's exit found
    // nothing, the log is whole.
    if (!request.follow() || saw_exit) break;
    if (!options_.trainer_running(request.job_id())) {
      saw_exit = true;
      continue;
    }
    if (!WaitUnlessStopping(options_.follow_poll)) break;
  }
  upload.Finish("log");
}

void LogUplink::SendFile(const v1::LogRequest& request) {
  auto call = NewContext(kUploadDeadline);
  if (!call) return;
  UploadStream upload(std::move(call), coordinator_->current(), request, options_.worker_id);
  absl::StatusOr<std::string> path =
      absl::NotFoundError(absl::StrCat("worker ", options_.worker_id, " serves no model files"));
  if (options_.job_dir) {
    path = ModelFilePath(request, options_.worker_id, options_.job_dir(request.job_id()), options_.checkpoint_root);
  }
  std::ifstream file;
  if (path.ok()) {
    file.open(*path, std::ios::binary);
    if (!file) path = absl::NotFoundError(absl::StrCat("worker ", options_.worker_id, " cannot read ", *path));
  }
  if (!path.ok()) upload.SendError(path.status());
  std::string chunk(kFileChunkBytes, '\0');
  while (upload.open() && path.ok()) {
    file.read(chunk.data(), chunk.size());
    std::streamsize got = file.gcount();
    if (got <= 0) break;
    upload.SendData(chunk.data(), static_cast<size_t>(got));
  }
  // A read error mid-file must not look like the whole file: cancel, so the
  // reader gets an error rather than a short file.
  if (upload.open() && path.ok() && file.bad()) upload.Cancel();
  upload.Finish("model file");
}

}  // namespace herd::worker
