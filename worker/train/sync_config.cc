#include "worker/train/sync_config.h"

#include "absl/strings/str_cat.h"
#include "worker/train/sync_buckets.h"

namespace herd {
namespace {

absl::Status Unknown(const char* field, const std::string& value) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown value \"", value, "\""));
}

}  // namespace

absl::StatusOr<SyncConfig> ParseSyncConfig(const v1::SyncSpec& sync) {
  SyncConfig config;
  if (sync.mode() == "average") {
    config.mode = SyncMode::kAverage;
  } else if (!sync.mode().empty() && sync.mode() != "allreduce") {
    return Unknown("sync.mode", sync.mode());
  }
  if (sync.first_bucket_mib() > 0) config.first_bucket_mib = sync.first_bucket_mib();
  if (sync.bucket_cap_mib() > 0) config.bucket_cap_mib = sync.bucket_cap_mib();
  auto wire = ParseWireType(sync.compression());
  if (!wire.ok()) return wire.status();
  config.wire_type = *wire;
  if (sync.same_host_transport() == "tcp") {
    config.same_host = SameHostTransport::kTcp;
  } else if (!sync.same_host_transport().empty() && sync.same_host_transport() != "shm") {
    return Unknown("sync.same_host_transport", sync.same_host_transport());
  }
  if (sync.every() > 0) config.every = sync.every();
  config.warmup_steps = sync.warmup_steps();
  const std::string& outer = sync.outer().kind();
  if (outer == "nesterov") {
    config.outer = OuterStepConfig{OuterKind::kNesterov, sync.outer().lr(), sync.outer().momentum()};
  } else if (!outer.empty() && outer != "none") {
    return Unknown("sync.outer.kind", outer);
  }
  return config;
}

const char* SyncModeName(SyncMode mode) { return mode == SyncMode::kAverage ? "average" : "allreduce"; }

const char* OuterKindName(OuterKind kind) { return kind == OuterKind::kNesterov ? "nesterov" : "none"; }

}  // namespace herd
