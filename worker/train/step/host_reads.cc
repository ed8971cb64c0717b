#include "worker/train/step/host_reads.h"

namespace herd {

std::vector<double> HostReads::Read(const std::vector<torch::Tensor>& scalars) {
  ++count_;
  if (scalars.empty()) return {};
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> flat;
  flat.reserve(scalars.size());
  for (const torch::Tensor& s : scalars) flat.push_back(s.detach().reshape({1}).to(scalars.front().device(), torch::kFloat64));
  const torch::Tensor host = torch::cat(flat).cpu().contiguous();
  const double* values = host.data_ptr<double>();
  return std::vector<double>(values, values + host.numel());
}

double HostReads::Read(const torch::Tensor& scalar) { return Read(std::vector<torch::Tensor>{scalar}).front(); }

}  // namespace herd
