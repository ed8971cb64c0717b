// The job's sync.* settings, parsed once into typed values: the trainer and
// the sync strategies switch on enums, never on the spec's strings.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"

namespace herd {

enum class SyncMode { kAllReduce, kAverage };
enum class OuterKind { kNone, kNesterov };

// Mode average's outer step on the anchor (parameter_averaging.h).
struct OuterStepConfig {
  OuterKind kind = OuterKind::kNone;
  double lr = 1;        // nesterov only
  double momentum = 0;  // nesterov only
};
enum class SameHostTransport { kSharedMemory, kTcp };

// Built only by ParseSyncConfig from a defaulted spec: the defaults are the
// spec's (common/job_spec.h:ApplySyncDefaults), set once, so no member here
// carries one of its own.
struct SyncConfig {
  SyncMode mode{};
  double first_bucket_mib{};
  double bucket_cap_mib{};
  DataType wire_type = DataType::kFloat32;  // sync.compression none/fp16/bf16
  bool int8_wire{};                         // sync.compression int8 (mode average)
  SameHostTransport same_host{};
  // Mode average.
  int64_t every{};         // local steps between rounds
  int64_t warmup_steps{};  // all-reduce steps before the first local step
  OuterStepConfig outer;
  int fragments{};         // parameter fragments, synced on staggered schedules
  // Local steps between a round's launch and its merge (tau; sync.overlap
  // is 1): its communication runs while they train.
  int64_t overlap_steps{};
  // sync.overlap_steps: auto: tau is chosen from measured round and step
  // times (overlap_controller.h); overlap_steps is then 0 in the spec.
  bool overlap_auto{};
  // Mode allreduce: each rank keeps and steps only its shard of the
  // optimizer state (ZeRO-1, sharded_optimizer.h).
  bool shard_optimizer{};
  // sync.shares throughput: ranks' shares of a step differ, so averaging
  // rounds weight each rank's parameters by the samples it trained.
  bool throughput_shares{};
  // Whether rounds sync only part of the parameters or merge late:
  // replicas then agree only at full syncs (sync_strategy.h).
  bool streaming() const { return fragments > 1 || overlapped(); }
  // Whether rounds merge some steps after their launch.
  bool overlapped() const { return overlap_steps > 0 || overlap_auto; }
};

// INVALID_ARGUMENT naming the sync.* field for a value it does not know.
absl::StatusOr<SyncConfig> ParseSyncConfig(const v1::SyncSpec& sync);

const char* OuterKindName(OuterKind kind);

}  // namespace herd
