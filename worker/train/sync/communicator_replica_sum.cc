#include "worker/train/sync/communicator_replica_sum.h"

#include "absl/strings/str_cat.h"
#include "worker/comm/peer_fault.h"

namespace herd {

void CommunicatorReplicaSum::Sum(torch::Tensor& values) {
  TORCH_CHECK(values.is_contiguous() && values.scalar_type() == torch::kFloat,
              "ReplicaSum takes contiguous float32 tensors");
  if (!status_.ok() || comm_->size() == 1) return;
  if (compute_mutex_ != nullptr) compute_mutex_->unlock();
  absl::Status status = comm_->AllReduce(values.data_ptr(), static_cast<size_t>(values.numel()), DataType::kFloat32);
  if (compute_mutex_ != nullptr) compute_mutex_->lock();
  if (!status.ok()) {
    status_ = WithContext(status, "batch norm statistics all-reduce: ");
  }
}

}  // namespace herd
