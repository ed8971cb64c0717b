// A subgroup's communicator (an island, a cross group) as the whole group
// sees it: every call goes to the subgroup's own communicator, and a
// failure's blamed peer is renumbered from its rank in the subgroup to its
// rank in the whole group (InGroupRanks, peer_fault.h). The trainer reports
// that rank, and the coordinator leaves out that member: without this, a
// peer that failed as rank 1 of its island would be reported as rank 1 of
// the generation, another member.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "worker/comm/communicator.h"

namespace herd {

class SubgroupCommunicator : public Communicator {
 public:
  // `inner` (not owned) must outlive this; `group_ranks[i]` is subgroup
  // rank i's rank in the whole group.
  SubgroupCommunicator(Communicator* inner, std::vector<int> group_ranks);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  std::string backend() const override { return inner_->backend(); }
  std::shared_ptr<Work> AllReduceAsync(void* data, size_t count, DataType type) override;
  std::shared_ptr<Work> BroadcastAsync(void* data, size_t bytes, int root) override;
  std::shared_ptr<Work> AllGatherAsync(const void* in, size_t bytes, void* out) override;
  std::shared_ptr<Work> BarrierAsync() override;
  std::shared_ptr<Work> ReduceScatterAsync(const void* in, void* out, size_t block_count, DataType type) override;
  RangeLayout ReduceScatterLayout(size_t count, DataType type) const override {
    return inner_->ReduceScatterLayout(count, type);
  }
  std::shared_ptr<Work> ReduceScatterInPlaceAsync(void* data, size_t count, DataType type) override;
  std::shared_ptr<void> AllocateAllReduceBuffer(size_t bytes) override {
    return inner_->AllocateAllReduceBuffer(bytes);
  }

 private:
  std::shared_ptr<Work> Renumbered(std::shared_ptr<Work> work) const;

  Communicator* const inner_;
  // Shared with the work handles, which may outlive this.
  const std::shared_ptr<const std::vector<int>> group_ranks_;
};

}  // namespace herd
