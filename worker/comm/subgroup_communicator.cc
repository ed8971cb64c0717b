#include "worker/comm/subgroup_communicator.h"

#include <utility>

#include "worker/comm/peer_fault.h"

namespace herd {
namespace {

class RenumberedWork : public Work {
 public:
  RenumberedWork(std::shared_ptr<Work> inner, std::shared_ptr<const std::vector<int>> group_ranks)
      : inner_(std::move(inner)), group_ranks_(std::move(group_ranks)) {}
  absl::Status Wait() override { return InGroupRanks(inner_->Wait(), *group_ranks_); }
  bool Done() const override { return inner_->Done(); }
  WorkTimes times() const override { return inner_->times(); }

 private:
  const std::shared_ptr<Work> inner_;
  const std::shared_ptr<const std::vector<int>> group_ranks_;
};

}  // namespace

SubgroupCommunicator::SubgroupCommunicator(Communicator* inner, std::vector<int> group_ranks)
    : inner_(inner), group_ranks_(std::make_shared<const std::vector<int>>(std::move(group_ranks))) {}

std::shared_ptr<Work> SubgroupCommunicator::Renumbered(std::shared_ptr<Work> work) const {
  return std::make_shared<RenumberedWork>(std::move(work), group_ranks_);
}

std::shared_ptr<Work> SubgroupCommunicator::AllReduceAsync(void* data, size_t count, DataType type) {
  return Renumbered(inner_->AllReduceAsync(data, count, type));
}

std::shared_ptr<Work> SubgroupCommunicator::BroadcastAsync(void* data, size_t bytes, int root) {
  return Renumbered(inner_->BroadcastAsync(data, bytes, root));
}

std::shared_ptr<Work> SubgroupCommunicator::AllGatherAsync(const void* in, size_t bytes, void* out) {
  return Renumbered(inner_->AllGatherAsync(in, bytes, out));
}

std::shared_ptr<Work> SubgroupCommunicator::BarrierAsync() { return Renumbered(inner_->BarrierAsync()); }

std::shared_ptr<Work> SubgroupCommunicator::ReduceScatterAsync(const void* in, void* out, size_t block_count,
                                                               DataType type) {
  return Renumbered(inner_->ReduceScatterAsync(in, out, block_count, type));
}

std::shared_ptr<Work> SubgroupCommunicator::ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) {
  return Renumbered(inner_->ReduceScatterInPlaceAsync(data, count, type));
}

}  // namespace herd
