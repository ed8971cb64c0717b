// The job spec contract: defaults, and validation that names the bad field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/herd.pb.h"

namespace herd {

// JobSpec.priority's range (default 0): higher is scheduled first.
inline constexpr int64_t kMinPriority = -1000;
inline constexpr int64_t kMaxPriority = 1000;

// Built-in model names; "torchscript" loads ModelSpec.path instead.
const std::vector<std::string>& KnownModels();

// Fills unset fields with herd's defaults (documented in docs/job-spec.md).
void ApplyJobDefaults(v1::JobSpec* spec);

// INVALID_ARGUMENT naming the first bad field ("optimizer.lr: must be > 0").
// Expects defaults to have been applied. Does not touch the file system: the
// coordinator may not see the workers' files; trainers check paths at start.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Samples one step consumes across all ranks at `world_size`: the spec's
// global_batch_size, or world_size x batch_size x grad_accumulation.
int64_t SamplesPerStep(const v1::JobSpec& spec, int64_t world_size);

// The sync.* part of ApplyJobDefaults and ValidateJobSpec, for a SyncSpec on
// its own (the trainer converts it: worker/train/sync_config.h).
void ApplySyncDefaults(v1::SyncSpec* sync);
absl::Status ValidateSyncSpec(const v1::SyncSpec& sync);

// placement.require: label keys and values as herd-worker --label takes
// them (common/labels.h).
absl::Status ValidatePlacement(const v1::PlacementSpec& placement);

}  // namespace herd
