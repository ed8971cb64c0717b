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
    : ForwardingCommunicator(inner),
      group_ranks_(std::make_shared<const std::vector<int>>(std::move(group_ranks))) {}

std::shared_ptr<Work> SubgroupCommunicator::Issue(Issuer issue) {
  return std::make_shared<RenumberedWork>(issue(), group_ranks_);
}

}  // namespace herd
