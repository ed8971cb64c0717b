// A subgroup's communicator (an island, a cross group) as the whole group
// sees it: every call goes to the subgroup's own communicator, and a
// failure's blamed peer is renumbered from its rank in the subgroup to its
// rank in the whole group (InGroupRanks, peer_fault.h). The trainer reports
// that rank, and the coordinator leaves out that member: without this, a
// peer that failed as rank 1 of its island would be reported as rank 1 of
// the generation, another member.
#pragma once

#include <memory>
#include <vector>

#include "worker/comm/forwarding_communicator.h"

namespace herd {

class SubgroupCommunicator : public ForwardingCommunicator {
 public:
  // `inner` (not owned) must outlive this; `group_ranks[i]` is subgroup
  // rank i's rank in the whole group.
  SubgroupCommunicator(Communicator* inner, std::vector<int> group_ranks);

 protected:
  // The collective's Work, its failure renumbered.
  std::shared_ptr<Work> Issue(Issuer issue) override;

 private:
  // Shared with the work handles, which may outlive this.
  const std::shared_ptr<const std::vector<int>> group_ranks_;
};

}  // namespace herd
