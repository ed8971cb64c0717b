// Keeps a trainer's metrics snapshot file fresh: a background thread writes
// what `source` collects to `path` every `interval`, and once more on
// destruction so the daemon sees the trainer's final figures.
#pragma once

#include <prometheus/collectable.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace herd {

struct MetricsSnapshotWriterOptions {
  std::string path;
  std::chrono::milliseconds interval{1000};
  // Called before each snapshot: refreshes figures nothing else updates,
  // polled here so that reading them costs the step loop nothing.
  std::function<void()> refresh;
};

class MetricsSnapshotWriter {
 public:
  // `source` must outlive the writer. Starts writing at once.
  MetricsSnapshotWriter(const prometheus::Collectable& source, MetricsSnapshotWriterOptions options);
  ~MetricsSnapshotWriter();
  MetricsSnapshotWriter(const MetricsSnapshotWriter&) = delete;
  MetricsSnapshotWriter& operator=(const MetricsSnapshotWriter&) = delete;

  // One snapshot now; the thread calls this too.
  absl::Status WriteNow();

 private:
  void Loop();

  const prometheus::Collectable& source_;
  const MetricsSnapshotWriterOptions options_;
  absl::Mutex write_mu_;  // the thread and a final WriteNow() share the tmp file
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace herd
