#include "worker/train/report/metrics_snapshot_writer.h"

#include <glog/logging.h>

#include "absl/time/time.h"
#include "worker/train/report/metrics_snapshot.h"

namespace herd {

MetricsSnapshotWriter::MetricsSnapshotWriter(const prometheus::Collectable& source,
                                             MetricsSnapshotWriterOptions options)
    : source_(source), options_(std::move(options)) {
  thread_ = std::thread(&MetricsSnapshotWriter::Loop, this);
}

MetricsSnapshotWriter::~MetricsSnapshotWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  if (absl::Status status = WriteNow(); !status.ok()) LOG(WARNING) << "final metrics snapshot: " << status;
}

absl::Status MetricsSnapshotWriter::WriteNow() {
  absl::MutexLock lock(&write_mu_);
  if (options_.refresh) options_.refresh();
  return WriteMetricsSnapshot(options_.path, source_.Collect());
}

void MetricsSnapshotWriter::Loop() {
  bool warned = false;  // a full disk must not flood the trainer's log
  while (true) {
    absl::Status status = WriteNow();
    if (!status.ok() && !warned) {
      LOG(WARNING) << "metrics snapshot (the worker's /metrics will lag): " << status;
      warned = true;
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.interval))) return;
  }
}

}  // namespace herd
