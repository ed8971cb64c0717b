// The daemon's side of `herd logs`: keeps a WatchLogRequests stream open to
// the coordinator and answers each LogRequest with an UploadLog stream of the
// asked trainer's log (see LogRelay in the coordinator). With `follow` it goes
// on sending what the trainer appends until the trainer has exited and the
// file is read to its end, or the reader leaves. A request naming a file
// (`herd fetch`) is answered the same way with that model file.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/leader_channel.h"
#include "proto/herd.grpc.pb.h"

namespace herd::worker {

struct LogUplinkOptions {
  std::string worker_id;
  std::string token;  // bearer token; empty when auth is off
  // Where a job's trainer log is, and whether its trainer still runs here.
  std::function<std::string(const std::string& job_id)> log_path;
  std::function<bool(const std::string& job_id)> trainer_running;
  // `herd fetch`: where a job's dir is (its final model files) and where
  // checkpoint folders are (see ModelFilePath for what may be sent).
  std::function<std::string(const std::string& job_id)> job_dir;
  std::string checkpoint_root;
  // A watch stream is reopened after this long (streams get deadlines too).
  std::chrono::milliseconds stream_period{std::chrono::minutes(10)};
  // How often a followed log is checked for new lines.
  std::chrono::milliseconds follow_poll{200};
  // How long a followed log that does not exist yet (its trainer is being
  // started) is waited for.
  std::chrono::milliseconds log_wait{std::chrono::seconds(30)};
  std::chrono::milliseconds min_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
};

class LogUplink {
 public:
  // Talks to the leader among `coordinator`'s addresses: the one that asks.
  LogUplink(LogUplinkOptions options, std::shared_ptr<LeaderChannel> coordinator);
  ~LogUplink();  // Stop()s

  void Start();
  // Ends the watch stream and every upload; thread-safe, idempotent.
  void Stop();

 private:
  struct Upload {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  void WatchLoop();
  void StartUpload(v1::LogRequest request);
  void SendLog(const v1::LogRequest& request);
  // A request with `file` set: that file, whole, in 1 MiB chunks.
  void SendFile(const v1::LogRequest& request);
  // The context for a new call, cancelled by Stop(); nullptr once stopping.
  std::shared_ptr<grpc::ClientContext> NewContext(std::chrono::milliseconds timeout);
  // Waits `delay`; false (at once) when stopping.
  bool WaitUnlessStopping(std::chrono::milliseconds delay);

  const LogUplinkOptions options_;
  std::shared_ptr<LeaderChannel> coordinator_;
  std::thread watcher_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::weak_ptr<grpc::ClientContext>> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<Upload> uploads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace herd::worker
