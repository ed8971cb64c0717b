#include "worker/train/batches/sample_ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace herd {

absl::StatusOr<std::unique_ptr<SampleLedger>> SampleLedger::FromEnvironment(const std::string& job_id,
                                                                             const std::string& worker_id) {
  const char* dir = std::getenv(kSampleLedgerDirEnv);
  if (dir == nullptr || *dir == '\0') return std::unique_ptr<SampleLedger>();
  const std::string path = absl::StrCat(dir, "/", job_id, ".", worker_id, "-", getpid(), ".ledger");
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("sample ledger ", path, ": ", std::strerror(errno)));
  return std::unique_ptr<SampleLedger>(new SampleLedger(fd));
}

SampleLedger::~SampleLedger() { close(fd_); }

void SampleLedger::Append(const std::string& line) {
  // O_APPEND with one write: the line lands whole or not at all.
  const ssize_t written = write(fd_, line.data(), line.size());
  (void)written;
}

void SampleLedger::GenerationStart(int64_t generation, int64_t step, int64_t epoch, int64_t samples_in_epoch) {
  Append(absl::StrCat("start ", generation, " ", step, " ", epoch, " ", samples_in_epoch, "\n"));
}

void SampleLedger::Step(int64_t generation, int64_t step, int64_t epoch, const std::vector<int64_t>& ids) {
  Append(absl::StrCat("step ", generation, " ", step, " ", epoch, ids.empty() ? "" : " ", absl::StrJoin(ids, " "),
                      "\n"));
}

absl::StatusOr<LedgerReplay> ReplayLedgers(const std::vector<std::string>& contents) {
  struct StepRecord {
    int64_t generation, step, epoch;
    std::vector<int64_t> ids;
  };
  std::vector<StepRecord> steps;
  LedgerReplay replay;
  for (const std::string& content : contents) {
    for (absl::string_view line : absl::StrSplit(content, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
      std::vector<int64_t> numbers(fields.empty() ? 0 : fields.size() - 1);
      for (size_t i = 1; i < fields.size(); ++i) {
        if (!absl::SimpleAtoi(fields[i], &numbers[i - 1])) {
          return absl::InvalidArgumentError(absl::StrCat("ledger: bad number in '", line, "'"));
        }
      }
      if (fields.size() == 5 && fields[0] == "start") {
        auto [it, inserted] = replay.generation_start_step.emplace(numbers[0], numbers[1]);
        if (!inserted && it->second != numbers[1]) {
          return absl::InvalidArgumentError(absl::StrCat("ledger: generation ", numbers[0], " started at step ",
                                                         it->second, " and at step ", numbers[1]));
        }
      } else if (fields.size() >= 4 && fields[0] == "step") {
        steps.push_back({numbers[0], numbers[1], numbers[2], std::vector<int64_t>(numbers.begin() + 3, numbers.end())});
      } else {
        return absl::InvalidArgumentError(absl::StrCat("ledger: malformed line '", line, "'"));
      }
    }
  }
  for (StepRecord& record : steps) {
    bool rolled_back = false;
    for (const auto& [generation, start] : replay.generation_start_step) {
      if (generation > record.generation && start <= record.step) rolled_back = true;
    }
    if (rolled_back) {
      ++replay.rolled_back_records;
      continue;
    }
    auto& ids = replay.committed[record.epoch];
    ids.insert(ids.end(), record.ids.begin(), record.ids.end());
  }
  return replay;
}

}  // namespace herd
