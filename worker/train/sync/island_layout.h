// Where a rank stands among a generation's islands (sync.islands_by): a
// pure function of the join's peers, their labels and the label key.
//
// The coordinator orders ranks so each island's ranks are contiguous; this
// does not rely on it: an island is the set of ranks with one value of the
// key, islands ordered by that value, ranks within an island in rank order.
// Position p of every island averages shard p of the parameters with
// position p of the other islands (its cross group); there are m shards,
// m = the smallest island's size, so positions >= m (only in larger islands)
// own no shard and only receive the merged shards from their island.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd {

struct IslandLayout {
  std::vector<std::string> values;      // each island's label value, ascending
  std::vector<int> island_of;           // rank -> island index
  std::vector<std::vector<int>> ranks;  // island -> its ranks, ascending
  int island = 0;                       // mine
  int position = 0;                     // my index within my island's ranks
  int shards = 0;                       // m: the smallest island's size
  // The ranks at my position in every island (island order); empty when
  // position >= shards.
  std::vector<int> cross;

  const std::vector<int>& my_island() const { return ranks[static_cast<size_t>(island)]; }
  bool owns_shard() const { return position < shards; }
};

// INVALID_ARGUMENT naming the rank and worker whose peer lacks the label
// `key`, a rank outside the peers, or peers whose rank fields are not
// 0..n-1 in order.
absl::StatusOr<IslandLayout> LayoutIslands(const google::protobuf::RepeatedPtrField<v1::Peer>& peers,
                                           const std::string& key, int rank);

// The whole parameters cut into `shards` shards of whole tensors, balanced
// by bytes (largest first onto the lightest shard; ties to the lower index),
// so the same on every rank. Returns the tensor indices of each shard,
// ascending; fewer tensors than shards leaves the last shards empty.
std::vector<std::vector<int>> AssignShards(const std::vector<int64_t>& tensor_bytes, int shards);

}  // namespace herd
