#include "bench/stats.h"

#include <algorithm>
#include <cmath>

namespace herd::bench {

double Quantile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double position = std::clamp(q, 0.0, 1.0) * (samples.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, samples.size() - 1);
  const double weight = position - below;
  return samples[below] * (1 - weight) + samples[above] * weight;
}

}  // namespace herd::bench
