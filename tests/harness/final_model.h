// A model's tensors as the tests compare them: what a trainer left in its
// job dir (model-final.pt), or what a model starts from. No LibTorch in this
// header: a test file that includes LibTorch takes about 30 s to compile,
// twice per CI run (the CPU and the CUDA build); one that includes only this
// compiles in seconds. LibTorch stays in final_model.cc, compiled once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace herd::testing {

struct SavedTensor {
  std::string dtype;           // the element type's name, e.g. "Float", "Long"
  std::vector<int64_t> shape;
  std::string bytes;           // the elements, contiguous: equal bytes = bitwise equal
  std::vector<double> values;  // every element, converted to double
};

// By name, in name order.
using SavedModel = std::map<std::string, SavedTensor>;

SavedModel LoadFinalModel(const std::string& job_dir);

// The parameters (not buffers) of a built-in model as it is created from
// `seed` for inputs of `input_shape` and `classes` classes, as a trainer
// creates it: the point training starts from.
SavedModel InitialParameters(const std::string& model_name, const std::vector<int64_t>& input_shape, int classes,
                             uint64_t seed);

// Same type, shape and bits.
bool BitwiseEqual(const SavedTensor& a, const SavedTensor& b);

// The largest |a - b| over the elements, in double; infinity when the shapes
// differ.
double MaxAbsDifference(const SavedTensor& a, const SavedTensor& b);

// The largest |x| over the elements (0 for an empty tensor).
double MaxAbs(const SavedTensor& t);

// Names of the tensors that differ (not BitwiseEqual) between two models,
// plus any name present in only one of them.
std::vector<std::string> DifferingTensors(const SavedModel& a, const SavedModel& b);

}  // namespace herd::testing
