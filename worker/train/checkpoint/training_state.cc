#include "worker/train/checkpoint/training_state.h"

#include <torch/serialize/archive.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace herd {
namespace {

constexpr char kModelFile[] = "model.pt";
constexpr char kOptimizerFile[] = "optimizer.pt";
constexpr char kRngFile[] = "rng.pt";
constexpr char kPositionFile[] = "position.txt";
constexpr char kOuterFile[] = "outer.pt";

std::string ArchiveBytes(torch::serialize::OutputArchive& archive) {
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> SerializeTrainingParts(const TrainingStateParts& parts) {
  std::map<std::string, std::string> files;
  try {
    torch::serialize::OutputArchive params;
    for (const auto& [name, tensor] : parts.tensors) params.write(name, tensor.detach().to(torch::kCPU));
    files[kModelFile] = ArchiveBytes(params);

    torch::serialize::OutputArchive opt;
    parts.optimizer->save(opt);
    files[kOptimizerFile] = ArchiveBytes(opt);

    torch::serialize::OutputArchive rng;
    rng.write("cpu", parts.rng);
    files[kRngFile] = ArchiveBytes(rng);

    if (!parts.outer_state.empty()) {
      torch::serialize::OutputArchive outer;
      for (size_t i = 0; i < parts.outer_state.size(); ++i) {
        outer.write(std::to_string(i), parts.outer_state[i].detach().to(torch::kCPU));
      }
      files[kOuterFile] = ArchiveBytes(outer);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cannot serialize the training state: ", e.what()));
  }
  const TrainingPosition& position = parts.position;
  files[kPositionFile] = absl::StrCat("step ", position.step, "\nepoch ", position.epoch, "\nsamples_in_epoch ",
                                      position.samples_in_epoch, "\n");
  return files;
}

absl::StatusOr<std::map<std::string, std::string>> SerializeTrainingState(
    Model* model, torch::optim::Optimizer* optimizer, const TrainingPosition& position,
    const std::vector<torch::Tensor>& outer_state) {
  TrainingStateParts parts;
  parts.tensors = model->NamedParameters();
  for (auto& named : model->NamedBuffers()) parts.tensors.push_back(std::move(named));
  parts.optimizer = optimizer;
  parts.rng = at::detail::getDefaultCPUGenerator().get_state();
  parts.position = position;
  parts.outer_state = outer_state;
  return SerializeTrainingParts(parts);
}

absl::Status RestoreTrainingState(const std::map<std::string, std::string>& files, Model* model,
                                  torch::optim::Optimizer* optimizer, TrainingPosition* position,
                                  std::vector<torch::Tensor>* outer_state) {
  for (const char* name : {kModelFile, kOptimizerFile, kRngFile, kPositionFile}) {
    if (!files.count(name)) return absl::InvalidArgumentError(absl::StrCat("training state lacks ", name));
  }
  TrainingPosition loaded;
  for (absl::string_view line : absl::StrSplit(files.at(kPositionFile), '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, ' ');
    int64_t value = 0;
    if (!absl::SimpleAtoi(kv.second, &value)) return absl::InvalidArgumentError(absl::StrCat("bad position: ", line));
    if (kv.first == "step") loaded.step = value;
    if (kv.first == "epoch") loaded.epoch = value;
    if (kv.first == "samples_in_epoch") loaded.samples_in_epoch = value;
  }
  try {
    torch::NoGradGuard no_grad;
    torch::serialize::InputArchive params;
    params.load_from(files.at(kModelFile).data(), files.at(kModelFile).size());
    for (auto& [name, tensor] : model->NamedParameters()) {
      torch::Tensor saved;
      if (!params.try_read(name, saved)) return absl::InvalidArgumentError(absl::StrCat("state lacks parameter ", name));
      if (!saved.sizes().equals(tensor.sizes())) {
        return absl::InvalidArgumentError(absl::StrCat("parameter ", name, " has shape ", c10::str(saved.sizes()),
                                                       ", the model expects ", c10::str(tensor.sizes())));
      }
      tensor.copy_(saved);
    }
    // A model without buffers (every one before batch norm) reads none, so
    // checkpoints written before buffers were saved still load.
    for (auto& [name, tensor] : model->NamedBuffers()) {
      torch::Tensor saved;
      if (!params.try_read(name, saved)) return absl::InvalidArgumentError(absl::StrCat("state lacks buffer ", name));
      if (!saved.sizes().equals(tensor.sizes()) || saved.scalar_type() != tensor.scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat("buffer ", name, " has shape ", c10::str(saved.sizes()), " ",
                                                       c10::toString(saved.scalar_type()), ", the model expects ",
                                                       c10::str(tensor.sizes()), " ",
                                                       c10::toString(tensor.scalar_type())));
      }
      tensor.copy_(saved);
    }
    torch::serialize::InputArchive opt;
    opt.load_from(files.at(kOptimizerFile).data(), files.at(kOptimizerFile).size());
    optimizer->load(opt);

    if (outer_state != nullptr) {
      outer_state->clear();
      auto it = files.find(kOuterFile);
      if (it != files.end()) {
        torch::serialize::InputArchive outer;
        outer.load_from(it->second.data(), it->second.size());
        // A fresh tensor per entry: try_read writes into a defined tensor in
        // place, which would alias every entry to the last one.
        for (size_t i = 0;; ++i) {
          torch::Tensor t;
          if (!outer.try_read(std::to_string(i), t)) break;
          outer_state->push_back(t);
        }
      }
    }

    torch::serialize::InputArchive rng;
    rng.load_from(files.at(kRngFile).data(), files.at(kRngFile).size());
    torch::Tensor state;
    rng.read("cpu", state);
    {
      auto generator = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(state);
    };
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot restore the training state: ", e.what()));
  }
  *position = loaded;
  return absl::OkStatus();
}

}  // namespace herd
