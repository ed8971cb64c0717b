// Training and evaluation data, addressed by sample index so the sampler
// (worker/train/batches/sampler.h) decides which rank sees what.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.pb.h"

namespace herd {

struct Batch {
  torch::Tensor inputs;   // float32 [N, ...sample_shape]; int64 [N, T] for text
  torch::Tensor targets;  // int64 [N]; [N, T] for text
};

class Dataset {
 public:
  virtual ~Dataset();
  virtual int64_t size() const = 0;
  // Number of classes; the vocabulary size for text.
  virtual int64_t num_classes() const = 0;
  // One sample's input shape: {1, 28, 28} for IDX images, {F} for
  // synthetic, {T} for text.
  virtual std::vector<int64_t> sample_shape() const = 0;
  // The samples at `indices`, in that order (N may be 0). Runs every step, so
  // it is a gather from memory (or from a memory mapping). An index outside
  // [0, size()) throws c10::Error, like any other LibTorch failure in a
  // training step; data found wrong while gathering (a token id at or above
  // the vocabulary) throws DataError (data_error.h).
  virtual Batch Get(const std::vector<int64_t>& indices) const = 0;
};

// Loads the train or eval split named by `spec`:
//   idx:       spec.path is a folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
//              (t10k for eval); images scaled to [0, 1], shape {1, H, W};
//              num_classes = largest label + 1.
//   text:      spec.path is a file read as bytes; vocabulary = all 256 byte
//              values (the same ids for any file and both splits); sample i
//              is bytes [i*T, i*T + T + 1): inputs the first T, targets the
//              next T. Train = first 90% of the file, eval = the last 10%.
//   tokens:    spec.path is a memory-mapped file of little-endian spec.dtype
//              (uint16/uint32) token ids; vocabulary = spec.vocab_size;
//              windows as for text, over tokens. Eval = spec.validation_path,
//              or else the last 10% of spec.path (train the first 90%).
//   npy:       spec.inputs / spec.targets are memory-mapped .npy files
//              (inputs float32/float16/uint8 [N, ...], uint8 scaled to
//              [0, 1]; targets int64/int32 [N]); eval = the validation_ files,
//              or else the last 10% of the rows. num_classes = spec's, or the
//              largest training target + 1; every target checked below it.
//   synthetic: synthetic_samples samples (eval: 1/8 as many) of
//              synthetic_features standard-normal features, labelled by a
//              fixed random linear teacher drawn from `seed`: the same
//              teacher for both splits, different draws, so it is learnable.
// Errors name the field and file at fault.
absl::StatusOr<std::unique_ptr<Dataset>> LoadDataset(const v1::DatasetSpec& spec, bool train, uint64_t seed);

}  // namespace herd
