// Order statistics for benchmark samples.
#pragma once

#include <vector>

namespace herd::bench {

// The q-quantile (0 <= q <= 1) by linear interpolation between order
// statistics; 0 for no samples.
double Quantile(std::vector<double> samples, double q);
inline double Median(std::vector<double> samples) { return Quantile(std::move(samples), 0.5); }

}  // namespace herd::bench
