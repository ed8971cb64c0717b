#include "coordinator/write_trouble.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace herd::coordinator {
namespace {

constexpr double kFirstRetrySeconds = 0.5;
constexpr double kMaxRetrySeconds = 8;

}  // namespace

bool NoteWriteFailure(WriteTrouble& trouble, const std::string& error, double now) {
  const bool first = trouble.failures == 0;
  if (first) trouble.since = now;
  ++trouble.failures;
  trouble.last_attempt = now;
  trouble.error = error;
  return first;
}

double NextWriteAttempt(const WriteTrouble& trouble) {
  const int64_t doublings = std::min<int64_t>(std::max<int64_t>(trouble.failures - 1, 0), 16);
  return trouble.last_attempt + std::min(kFirstRetrySeconds * std::pow(2.0, doublings), kMaxRetrySeconds);
}

std::string StorageWarning(const WriteTrouble& trouble) {
  const absl::Time since = absl::FromUnixMicros(static_cast<int64_t>(trouble.since * 1e6));
  return absl::StrCat("the coordinator cannot persist this job's state since ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", since, absl::UTCTimeZone()), " (", trouble.error,
                      "); it retries, and until it succeeds a coordinator restart would lose the job's progress "
                      "since then");
}

}  // namespace herd::coordinator
