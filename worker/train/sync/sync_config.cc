#include "worker/train/sync/sync_config.h"

#include "common/job_spec.h"
#include "worker/train/sync/sync_buckets.h"

namespace herd {

absl::StatusOr<SyncConfig> ParseSyncConfig(const v1::SyncSpec& spec) {
  // The defaults and rules are the job spec's (common/job_spec.h), the same
  // the CLI and the coordinator apply: a spec they accepted passes, and what
  // follows only converts it.
  v1::SyncSpec sync = spec;
  ApplySyncDefaults(&sync);
  if (absl::Status s = ValidateSyncSpec(sync); !s.ok()) return s;
  SyncConfig config;
  config.mode = sync.mode() == v1::SYNC_MODE_AVERAGE ? SyncMode::kAverage : SyncMode::kAllReduce;
  config.first_bucket_mib = sync.first_bucket_mib();
  config.bucket_cap_mib = sync.bucket_cap_mib();
  switch (sync.compression()) {
    case v1::COMPRESSION_INT8:
      // Not a type the communicator sums: parameter averaging codes it (int8_wire.h).
      config.int8_wire = true;
      break;
    case v1::COMPRESSION_FP16:
      config.wire_type = DataType::kFloat16;
      break;
    case v1::COMPRESSION_BF16:
      config.wire_type = DataType::kBFloat16;
      break;
    default:
      config.wire_type = DataType::kFloat32;  // none: ValidateSyncSpec refused any other
  }
  config.same_host = sync.same_host_transport() == v1::SAME_HOST_TRANSPORT_TCP ? SameHostTransport::kTcp
                                                                              : SameHostTransport::kSharedMemory;
  config.every = sync.every();  // defaulted, and used, in mode average only
  config.warmup_steps = sync.warmup_steps();
  config.throughput_shares = sync.shares() == v1::SHARES_THROUGHPUT;
  if (sync.outer().kind() == v1::OUTER_KIND_NESTEROV) {
    config.outer = OuterStepConfig{OuterKind::kNesterov, sync.outer().lr(), sync.outer().momentum()};
  }
  config.fragments = static_cast<int>(sync.fragments());
  config.overlap_steps = sync.overlap_steps();
  config.overlap_auto = sync.overlap_steps_auto();
  config.shard_optimizer = sync.shard_optimizer();
  return config;
}

const char* OuterKindName(OuterKind kind) { return kind == OuterKind::kNesterov ? "nesterov" : "none"; }

}  // namespace herd
