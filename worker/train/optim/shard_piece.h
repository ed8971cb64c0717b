// A piece of a parameter owned by one rank: the unit of ZeRO-1 sharding
// (sharded_optimizer.h) and of the gradient reduce-scatter that feeds it
// (gradient_sync.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace herd {

// Elements [offset, offset + length) of parameter `param` (logical,
// row-major order), owned by `rank`; `flat` is the piece's position in the
// concatenation its layout cuts (see where pieces are made).
struct ShardPiece {
  size_t param = 0;
  int rank = 0;
  int64_t offset = 0;
  int64_t length = 0;
  int64_t flat = 0;
  bool operator==(const ShardPiece& o) const {
    return param == o.param && rank == o.rank && offset == o.offset && length == o.length && flat == o.flat;
  }
};

}  // namespace herd
