#include "coordinator/readmit_backoff.h"

#include <algorithm>
#include <cmath>

#include "coordinator/island_members.h"

namespace herd::coordinator {

double ReadmitBackoffSeconds(int strikes, double lease_seconds) {
  return lease_seconds * std::ldexp(1.0, std::clamp(strikes, 0, kMaxReadmitStrikes));
}

int StrikesAfterBlame(const ReadmitRecord* record, int64_t generation) {
  if (record == nullptr || record->readmitted_in != generation) return 0;
  return std::min(record->strikes + 1, kMaxReadmitStrikes);
}

bool ReadmittedIn(const JobRecord& job, const std::string& worker_id, int64_t generation) {
  auto it = job.readmit.find(worker_id);
  return it != job.readmit.end() && it->second.readmitted_in == generation;
}

LateBlameOutcome LeftOutForLateBlame(const ClusterState& state, const JobRecord& job, const std::string& blamer,
                                     const std::string& blamed, v1::PeerRollCall roll_call) {
  const std::string& key = job.info.spec().sync().islands_by();
  const Generation& generation = job.generation;
  if (key.empty()) return {{blamed}, ""};
  const std::string ours = IslandOfWorker(state, key, blamer);
  const std::string theirs = IslandOfWorker(state, key, blamed);
  if (ours == theirs || roll_call == v1::PEER_ROLL_CALL_SILENT) return {{blamed}, ""};
  struct Side {
    std::vector<std::string> members;  // unfinished, in rank order
    bool came_back = false;
  };
  Side side[2];
  for (const std::string& member : generation.members) {
    if (generation.finished.count(member)) continue;
    const std::string island = IslandOfWorker(state, key, member);
    for (int i = 0; i < 2; ++i) {
      if (island != (i == 0 ? ours : theirs)) continue;
      side[i].members.push_back(member);
      side[i].came_back = side[i].came_back || ReadmittedIn(job, member, generation.number);
    }
  }
  // Index of the side that goes out. Members come in rank order, so a
  // side's first member is its lowest rank; the blamer's side is never
  // empty (it holds the blamer), the blamed one's neither.
  int out = 1;
  if (side[0].came_back != side[1].came_back) {
    out = side[0].came_back ? 0 : 1;
  } else if (side[0].members.size() != side[1].members.size()) {
    out = side[0].members.size() < side[1].members.size() ? 0 : 1;
  } else if (!side[0].members.empty() && !side[1].members.empty()) {
    out = generation.RankOf(side[0].members.front()) > generation.RankOf(side[1].members.front()) ? 0 : 1;
  }
  return {side[out].members, out == 0 ? theirs : ours};
}

}  // namespace herd::coordinator
