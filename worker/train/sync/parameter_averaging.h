// Parameter averaging for sync mode `average` (local SGD, and DiLoCo-style
// outer optimization).
//
// Ranks train locally between rounds; a round makes every replica identical
// again. Each rank keeps the parameters of the last round (the "anchor",
// identical everywhere) and all-reduces its pseudo-gradient anchor - params,
// flattened into buckets sized like the gradient buckets. The mean
// pseudo-gradient g then drives an outer step on the anchor:
//   outer none:     anchor -= g                     (anchor = plain average)
//   outer nesterov: m = mu*m + g; anchor -= lr * (g + mu*m)
// and the new anchor becomes every replica's parameters. The inner
// optimizer's state stays local.
//
// Sending the difference from the shared anchor rather than raw parameters is
// what makes fp16/bf16/int8 wire compression usable: the rounding error
// scales with the size of the local update, not with the parameters'
// magnitude. int8 (int8_wire.h) also keeps each rank's rounding residual and
// adds it to its next pseudo-gradient (error feedback).
//
// Streaming (sync.fragments, sync.overlap_steps): the parameters are split
// into fragments, each with its own anchor, synced one at a time by Launch
// and Finish. Between the two the rank keeps training (tau local steps);
// Finish then sets the fragment to new_anchor + (params_now -
// params_at_launch), so the local steps taken while the all-reduce ran are
// kept on top of the averaged value (and enter the next pseudo-gradient).
// Launch followed at once by Finish is the plain blocking round.
//
// A round's network work is one all-reduce per bucket, plus with int8 a
// small all-gather of chunk scales before it; or, for int8 rounds of shape
// gather (round_shape.h), one all-gather per bucket of each rank's codes
// and own chunk scales, summed by every rank in rank order. Launched with
// `overlap_scales`, that all-gather runs during the following steps too:
// Advance, at a later step boundary, encodes with the scales and starts the
// data all-reduce. So no part of a round blocks the caller on a round trip.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/train/sync/averaging_rounds.h"
#include "worker/train/sync/round_timeline.h"
#include "worker/train/sync/sync_config.h"

namespace herd {

// The outer update on flat float tensors, in place: the math of a round once
// the mean pseudo-gradient is known. `momentum` is used for nesterov only.
void OuterStep(const OuterStepConfig& config, const torch::Tensor& pseudo_grad, torch::Tensor& anchor,
               torch::Tensor& momentum);

// A contiguous run of one parameter's elements (flattened).
struct ParameterPiece {
  int param = 0;
  int64_t start = 0;
  int64_t numel = 0;
};

struct ParameterAveragingOptions {
  double first_bucket_mib = 1;
  double bucket_cap_mib = 25;
  DataType wire_type = DataType::kFloat32;  // sync.compression none/fp16/bf16
  bool int8_wire = false;                   // sync.compression int8 (wire_type is then ignored)
  int fragments = 1;                        // sync.fragments
  OuterStepConfig outer;
};

class ParameterAveraging : public AveragingRounds {
 public:
  // INVALID_ARGUMENT for bucket sizes <= 0, a parameter that is not float32,
  // fewer parameter elements than fragments, or int8 with
  // more than 127 ranks. Takes the current parameters as anchor.
  static absl::StatusOr<std::unique_ptr<ParameterAveraging>> Create(std::vector<torch::Tensor> params,
                                                                   Communicator* comm,
                                                                   ParameterAveragingOptions options);
  ~ParameterAveraging() override;
  ParameterAveraging(const ParameterAveraging&) = delete;
  ParameterAveraging& operator=(const ParameterAveraging&) = delete;

  // Takes the current parameters as the anchor. Only valid when every
  // replica holds the same values (after a broadcast or an all-reduce step).
  void ResetAnchor() override;

  // Collective: every rank calls it at the same step, with no round in
  // flight (FAILED_PRECONDITION otherwise). Syncs every fragment. On success
  // all replicas hold bitwise-identical parameters; on failure the
  // parameters are left as they were.
  // `weights[f]`: in fragment f's mean this rank's parameters count that
  // many times (the weights of all ranks sum to the world size); empty: a
  // plain mean.
  absl::Status Round(const std::vector<double>& weights = {}) override;

  // Collective: starts the round of `fragment`. Several may be in flight.
  // With `keep_local_steps`, Finish keeps the steps taken since the launch;
  // without, the fragment becomes the new anchor (replicas identical).
  // `weight` as for Round. int8: the chunk scales are exchanged first,
  // blocking, or with `overlap_scales` in the background until Advance.
  // `side`: a few floats this rank sends with the round, all-gathered to
  // every rank (last_round().side_payloads once it finishes): with int8
  // they ride in the scale exchange, otherwise in one small all-gather
  // issued after the round's data, so they add no round trip before it.
  // Every rank must pass as many.
  absl::Status Launch(int fragment, bool keep_local_steps, double weight = 1, bool overlap_scales = false,
                      std::vector<float> side = {}) override;
  // Collective: for each of the `count` oldest launched rounds (all, by
  // default) still exchanging its int8 scales, waits for them, encodes and
  // starts its data all-reduce.
  absl::Status Advance(int count = -1) override;
  // Waits for the `count` oldest launched rounds (all, by default), in
  // launch order, and merges each into its fragment (see above). Counts as
  // one round in last_round().
  absl::Status Finish(int count = -1) override;
  bool in_flight() const override { return !launched_.empty(); }
  int rounds_in_flight() const { return static_cast<int>(launched_.size()); }
  int fragments() const override { return static_cast<int>(fragments_.size()); }
  // int8 only (false otherwise); rounds launched from now on.
  bool SetRoundShape(RoundShape shape) override;
  int round_ranks() const override { return comm_->size(); }
  // Parameter indices per fragment (registration order). Fragments cut the
  // flattened parameters into equal ranges, so one parameter may be in two.
  std::vector<std::vector<int>> fragment_params() const;

  const AveragingRoundStats& last_round() const override { return stats_; }

  // This rank's int8 rounding residuals (one flat tensor per bucket; empty
  // without int8): like the inner optimizer state, local to the rank, kept
  // in its in-memory commits and not in checkpoints.
  std::vector<torch::Tensor> Residuals() const override;
  // Empty `state`: zero residuals (a rank starting from another's state).
  absl::Status RestoreResiduals(const std::vector<torch::Tensor>& state) override;

  // The outer optimizer's state (nesterov momentum, one flat tensor per
  // bucket; empty for outer none), for checkpoints: the rest of the state is
  // the parameters themselves, which equal the anchor at every round.
  std::vector<torch::Tensor> OuterState() const override;
  // INVALID_ARGUMENT when `state` does not match this instance's buckets.
  absl::Status RestoreOuterState(const std::vector<torch::Tensor>& state) override;
  // The same state laid out by parameter rather than by bucket: one flat
  // float32 tensor per parameter (its elements in row-major order), empty
  // for outer none. Independent of fragments and bucket sizes, so it moves
  // between instances over different parts of a model (island shards).
  std::vector<torch::Tensor> OuterStateByParameter() const;
  // INVALID_ARGUMENT when `state` does not hold one tensor per parameter of
  // its numel (or is not empty for outer none).
  absl::Status RestoreOuterStateByParameter(const std::vector<torch::Tensor>& state);
  std::vector<int64_t> bucket_elements() const;

 private:
  struct Bucket {
    std::vector<int> params;  // indices into pieces_
    std::vector<int64_t> offsets;
    torch::Tensor anchor;    // float32, parameters at the last round
    torch::Tensor momentum;  // float32, outer momentum (nesterov)
    torch::Tensor delta;     // float32, pseudo-gradient being reduced
    torch::Tensor wire;      // compressed copy sent on the wire (fp16/bf16 values, int8 codes)
    torch::Tensor residual;  // float32, int8 error feedback
    torch::Tensor sent;      // float32, parameters at launch (overlapped rounds)
    torch::Tensor scale;     // float32, int8 shared per-chunk scale
    // Gather rounds: this rank's message (chunk scales as float32 bytes,
    // then the side payload on the first bucket, then the codes, encoded
    // in place; padded to whole floats) and every rank's, one row per
    // rank. Kept between rounds: a fragment's message has one size.
    torch::Tensor gather_mine, gather_all;
  };
  struct Fragment {
    std::vector<Bucket> buckets;
    std::vector<std::shared_ptr<Work>> works;
    bool keep_local_steps = false;
    bool gathered = false;  // launched with shape gather
    // int8, overlapped: the scale all-gather in flight (Advance finishes it).
    std::shared_ptr<Work> scales_work;
    torch::Tensor scales_mine, scales_all;
    // The side payload: this rank's values, then every rank's.
    std::vector<float> side_mine, side_all;
    std::shared_ptr<Work> side_work;
    // The round in flight: bytes it contributed, seconds it blocked the
    // caller, and its events for the timeline.
    int64_t bytes = 0;
    double blocked_seconds = 0;
    RoundEvents events;
  };

  ParameterAveraging(std::vector<torch::Tensor> params, Communicator* comm, ParameterAveragingOptions options);
  void BuildFragments();
  torch::Tensor ReadPiece(int piece) const;
  void WritePiece(int piece, const torch::Tensor& values);
  // int8: starts the all-gather of every rank's chunk maxima of `fragment`'s
  // buckets; FinishScales waits for it and sets the shared chunk scales.
  void StartScales(Fragment& fragment);
  absl::Status FinishScales(Fragment& fragment);
  // Encodes (compressed wires) and starts every bucket's all-reduce.
  void SendBuckets(Fragment& fragment);
  // Gather rounds: codes each bucket with its own scales and starts its
  // all-gather; DecodeGathered leaves in each bucket's delta the mean of
  // what every rank sent, added in rank order.
  void GatherBuckets(Fragment& fragment);
  void DecodeGathered(Fragment& fragment);
  void Merge(Fragment& fragment);
  std::vector<Bucket*> AllBuckets();
  std::vector<const Bucket*> AllBuckets() const;

  std::vector<torch::Tensor> params_;
  Communicator* comm_;
  ParameterAveragingOptions options_;
  OuterStepConfig outer_;
  DataType wire_type_;
  int int8_levels_ = 0;
  std::vector<ParameterPiece> pieces_;
  std::vector<Fragment> fragments_;
  std::vector<int> launched_;  // fragments in flight, launch order
  RoundShape shape_ = RoundShape::kAllReduce;
  AveragingRoundStats stats_;
  std::chrono::steady_clock::time_point last_round_end_;
};

}  // namespace herd
