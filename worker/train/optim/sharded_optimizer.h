// Sharded optimizer state, ZeRO stage 1 (sync.shard_optimizer, mode
// allreduce). Each rank owns pieces of the parameters: in training, what the
// gradient reduce-scatter sums for it (GradientSync::scattered_pieces: the
// communicator's layout of every bucket, cut at parameter boundaries); with
// no layout given, all parameters concatenated in registration order cut
// into W near-equal contiguous ranges (ShardPieces). Each rank keeps the
// optimizer state of its pieces only and steps only those. Every rank then
// receives the others' updated pieces in one all-gather, so every replica
// stays bitwise identical to the others and to a plain all-reduce run:
// Adam, AdamW and SGD-momentum update each element on its own, so stepping
// a piece equals stepping the whole tensor restricted to it.
//
// The optimizer is the trainer's own: for the step its parameter group
// lists this rank's piece tensors (1-D leaves holding the piece's values,
// their gradients slices of the parameters' gradients) instead of the
// parameters, so options and learning rate are the same, and the pieces'
// state lives in the optimizer's state map keyed by the piece tensors. A
// piece covering a whole parameter is the parameter itself (no copies, its
// state whole already; at W=1 sharding costs nothing).
//
// Gradients are reduce-scattered by the bucketed sync overlapped with
// backward (gradient_sync.h): each rank holds the summed gradient of its
// own pieces only, the rest of each .grad holds partial sums. The sums are
// bitwise the plain run's (the layout is the all-reduce's, see
// Communicator::ReduceScatterLayout). Clipping therefore needs a norm from
// every rank's pieces: ClipGradNorm.
//
// Commits and checkpoints hold the whole per-parameter state, in the
// unsharded format: GatherState gives every rank the state reassembled from
// the owners' pieces (an all-gather of step counts, then every rank's piece
// state packed into one block: one padded all-gather, or one broadcast per
// rank where the blocks differ widely in size) right before a commit is
// captured, so a lost rank's shard survives in every other rank's commit,
// and healing, checkpoints and a re-form at another world size need no
// format of their own. Whole per-parameter state (after a gather, a restore
// or a heal) is cut back into this rank's pieces before the next step.
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/train/optim/optimizer_state.h"
#include "worker/train/optim/shard_piece.h"

namespace herd {

// Rank r owns flat elements [bounds[r], bounds[r+1]), bounds[r] =
// floor(total * r / world): ranges differ by at most one element.
std::vector<int64_t> FlatShardBounds(int64_t total_elements, int world);

// The pieces of tensors of `numels` elements each at `world` ranks, in flat
// order (parameter, then offset); no empty pieces.
std::vector<ShardPiece> ShardPieces(const std::vector<int64_t>& numels, int world);

class OptimizerShards {
 public:
  // INVALID_ARGUMENT when the parameters do not share one dtype and device
  // (the parameter all-gather packs them into one buffer).
  // Flat ranges: the parameters' concatenation cut by ShardPieces.
  static absl::StatusOr<std::unique_ptr<OptimizerShards>> Create(std::vector<torch::Tensor> params,
                                                                 Communicator* comm);
  // Given pieces (every rank's, as GradientSync::scattered_pieces gives):
  // each rank owns what its reduce-scattered gradients cover. A parameter
  // no piece covers (no gradient) is owned whole by rank 0; INVALID_ARGUMENT
  // when pieces overlap, leave part of a parameter out, or name a rank or
  // parameter that does not exist.
  static absl::StatusOr<std::unique_ptr<OptimizerShards>> Create(std::vector<torch::Tensor> params,
                                                                 Communicator* comm,
                                                                 std::vector<ShardPiece> pieces);

  int64_t owned_bytes() const { return owned_bytes_; }
  // What one ShareParameters counts in SyncTraffic::wire_bytes: half its
  // gathered buffer (every rank's padded block), as a reduce-scatter counts
  // half its bucket, so the two together count what an all-reduce of the
  // same bytes counts. 0 at one rank (no collective).
  int64_t share_wire_bytes() const;
  int64_t total_bytes() const { return total_bytes_; }
  std::string Describe() const;

  // Cuts whole per-parameter state (a restore, heal or gather put there)
  // into this rank's pieces and drops the rest, and any entry neither a
  // parameter's nor a live piece's.
  void DropForeignState(torch::optim::Optimizer& optimizer);
  // The optimizer step on this rank's pieces only (after DropForeignState),
  // each piece's values copied back into its parameter. No collective.
  // UNIMPLEMENTED for an optimizer other than sgd, adam and adamw or with
  // more than one parameter group.
  absl::Status StepOwnRange(torch::optim::Optimizer& optimizer);
  // Collective, after the step: every rank receives the owners' updated
  // pieces (one all-gather, each rank's pieces packed, padded to the largest).
  absl::Status ShareParameters();
  // Collective (one all-reduce of a float64): clips the gradients of this
  // rank's pieces so that the global norm (over every rank's pieces, i.e.
  // every gradient element once) is at most `max_norm`, by grad_clip.h's
  // rule, which the unsharded path applies to whole gradients. Returns the
  // norm. For reduce-scattered gradients, where only the own pieces hold
  // the sums.
  absl::StatusOr<double> ClipGradNorm(double max_norm);
  // Collective: every rank receives the whole per-parameter optimizer state
  // reassembled from the owners' pieces (on failure, each rank keeps its
  // own pieces alone). UNIMPLEMENTED as StepOwnRange.
  absl::Status GatherState(torch::optim::Optimizer& optimizer);

 private:
  OptimizerShards(std::vector<torch::Tensor> params, Communicator* comm, std::vector<ShardPiece> pieces);

  // GatherState's parts. Where each rank's packed piece state lies in the
  // exchanged buffer: one padded all-gather, or one broadcast per rank of
  // its exact block where the padding would cost more than the data.
  struct StateBlocks {
    std::vector<int64_t> elements;  // per rank
    std::vector<int64_t> start;     // per rank: where its block starts in the buffer
    int64_t largest = 0;
    int64_t buffer_elements = 0;
    bool all_gather = false;
  };
  // Collective: per parameter, the step count its owners' pieces agree on
  // (-1 no state); INTERNAL where they disagree.
  absl::StatusOr<std::vector<int64_t>> GatherSteps(torch::optim::Optimizer& optimizer) const;
  StateBlocks PlanStateBlocks(const std::vector<int64_t>& steps, size_t live_tensors) const;
  // This rank's piece state into `send`: pieces in flat order, each piece's
  // live state tensors in the spec's order.
  absl::Status PackOwnState(torch::optim::Optimizer& optimizer, const std::vector<int64_t>& steps,
                            const OptimizerStateSpec& spec, const torch::Tensor& send) const;
  // Collective: every rank's piece state, packed by PackOwnState.
  absl::StatusOr<torch::Tensor> ExchangeStateBlocks(torch::optim::Optimizer& optimizer,
                                                    const std::vector<int64_t>& steps, const OptimizerStateSpec& spec,
                                                    const StateBlocks& blocks);
  // The whole per-parameter state from the exchanged pieces; drops the pieces'.
  void AssembleWholeState(torch::optim::Optimizer& optimizer, const std::vector<int64_t>& steps,
                          const OptimizerStateSpec& spec, const StateBlocks& blocks, const torch::Tensor& gathered);

  bool Whole(const ShardPiece& piece) const { return piece.length == params_[piece.param].numel(); }
  // The parameter's elements of `piece` (flat, logical order), and writing them.
  torch::Tensor ReadParam(const ShardPiece& piece) const;
  void WriteParam(const ShardPiece& piece, const torch::Tensor& values) const;

  std::vector<torch::Tensor> params_;
  Communicator* comm_;
  std::vector<ShardPiece> pieces_;          // every rank's, in the layout's order
  std::vector<int64_t> packed_;             // per piece: its place in its rank's all-gather block
  std::vector<int64_t> rank_elements_;      // per rank: elements it owns
  std::vector<ShardPiece> own_;             // this rank's, in pieces_' order
  std::vector<int64_t> own_packed_;         // packed_ of own_
  std::vector<torch::Tensor> own_tensors_;  // one leaf per own piece; the parameter where Whole
  std::set<size_t> whole_params_;           // parameters this rank owns whole
  bool pieces_hold_state_ = false;          // own_tensors_' state entries are this object's
  int64_t block_elements_ = 0;              // the largest rank's elements: the all-gather's block
  int64_t owned_bytes_ = 0;
  int64_t total_bytes_ = 0;
  torch::Tensor send_;      // this rank's range, packed
  torch::Tensor gathered_;  // every rank's block, rank order
};

}  // namespace herd
