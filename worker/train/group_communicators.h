// A generation's communicators: what a re-form replaces. The trainer asks a
// CommunicatorFactory for them, so tests can hand in their own (a fault
// injected at a chosen collective) while real trainers use
// CreateGroupCommunicators.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"
#include "worker/comm/communicator.h"
#include "worker/train/coordinator_link.h"
#include "worker/train/training_context.h"

namespace herd {

struct GroupCommunicators {
  // Gloo over CPU buffers: hashes, evaluation sums, healing, replica checks.
  std::unique_ptr<Communicator> control;
  // Ranks on one host (CPU): float32 all-reduce through shared memory.
  std::unique_ptr<Communicator> shm;
  // Device cuda: NCCL for gradients and averaged parameters (device buffers).
  std::unique_ptr<Communicator> nccl;
  // Gradients and averaging: nccl on cuda, else shm, else control.
  Communicator* data = nullptr;
};

using CommunicatorFactory = std::function<absl::StatusOr<GroupCommunicators>(
    const v1::JoinGenerationResponse& join, const TrainingContext& context, CoordinatorLink* link)>;

// The real trainer's choice: Gloo always; shared memory when every rank of a
// CPU job is on one host (sync.same_host_transport shm); NCCL on cuda. All
// bootstrap through the generation's store at the coordinator.
absl::StatusOr<GroupCommunicators> CreateGroupCommunicators(const v1::JoinGenerationResponse& join,
                                                            const TrainingContext& context, CoordinatorLink* link);

}  // namespace herd
