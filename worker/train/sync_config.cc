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
  if (sync.compression() == "int8") {
    // Not a type the communicator sums: parameter averaging codes it (int8_wire.h).
    if (config.mode != SyncMode::kAverage) {
      return absl::InvalidArgumentError("sync.compression: int8 needs sync.mode average");
    }
    config.int8_wire = true;
  } else {
    auto wire = ParseWireType(sync.compression());
    if (!wire.ok()) return wire.status();
    config.wire_type = *wire;
  }
  if (sync.same_host_transport() == "tcp") {
    config.same_host = SameHostTransport::kTcp;
  } else if (!sync.same_host_transport().empty() && sync.same_host_transport() != "shm") {
    return Unknown("sync.same_host_transport", sync.same_host_transport());
  }
  if (sync.every() > 0) config.every = sync.every();
  config.warmup_steps = sync.warmup_steps();
  if (sync.shares() == "throughput") {
    config.throughput_shares = true;
  } else if (!sync.shares().empty() && sync.shares() != "equal") {
    return Unknown("sync.shares", sync.shares());
  }
  const std::string& outer = sync.outer().kind();
  if (outer == "nesterov") {
    config.outer = OuterStepConfig{OuterKind::kNesterov, sync.outer().lr(), sync.outer().momentum()};
  } else if (!outer.empty() && outer != "none") {
    return Unknown("sync.outer.kind", outer);
  }
  if (sync.fragments() > 1) config.fragments = static_cast<int>(sync.fragments());
  config.overlap = sync.overlap();
  if (config.mode != SyncMode::kAverage && config.streaming()) {
    return absl::InvalidArgumentError(
        absl::StrCat(sync.overlap() ? "sync.overlap" : "sync.fragments", " needs sync.mode average"));
  }
  config.shard_optimizer = sync.shard_optimizer();
  if (config.shard_optimizer && config.mode != SyncMode::kAllReduce) {
    return absl::InvalidArgumentError("sync.shard_optimizer needs sync.mode allreduce");
  }
  if (config.fragments > config.every) {
    return absl::InvalidArgumentError(absl::StrCat("sync.fragments: ", config.fragments,
                                                   " fragments need sync.every >= ", config.fragments,
                                                   " (each fragment syncs once per `every` local steps)"));
  }
  return config;
}

const char* SyncModeName(SyncMode mode) { return mode == SyncMode::kAverage ? "average" : "allreduce"; }

const char* OuterKindName(OuterKind kind) { return kind == OuterKind::kNesterov ? "nesterov" : "none"; }

}  // namespace herd
