// Watching a job and its processes from a test: polls of `herd status`,
// trainer pids, sample ledgers. Shared by the fault and stall tests.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tests/harness/local_cluster.h"
#include "worker/train/batches/sample_ledger.h"

namespace herd::testing {

// pids of the trainers worker `index` of this cluster runs (by work dir).
std::vector<pid_t> TrainerPids(const LocalCluster& cluster, int index);

// Signals a worker daemon and its trainers: the whole machine fails.
void SignalWorker(LocalCluster& cluster, int index, int signal);

// Stops the trainers of workers `members` (the job's survivors), runs `act`
// (e.g. start or resume the worker that should join), and resumes them once
// the coordinator has asked them to re-form for the joiner: their daemon
// holds a reform-request naming `generation` (growth waits a lease after a
// generation forms). So the job cannot end before the joiner joins, however
// fast the machine trains. False if `act` fails or no re-form is asked
// within `timeout`; the trainers are resumed either way.
bool HoldTrainersUntilReformAsked(LocalCluster& cluster, const std::string& id, const std::vector<int>& members,
                                  int64_t generation, const std::function<bool()>& act,
                                  std::chrono::seconds timeout);

// Polls `herd status` until `done(job)` or the timeout; returns the last status.
nlohmann::json WaitForJob(LocalCluster& cluster, const std::string& id,
                          const std::function<bool(const nlohmann::json&)>& done, std::chrono::seconds timeout);

int64_t Field(const nlohmann::json& job, const char* name);

// Waits until the job (or its end) shows `world` ranks training more than 10
// steps past `step`; returns the last status and the seconds it took.
std::pair<nlohmann::json, double> WaitForProgressOn(LocalCluster& cluster, const std::string& id, int64_t world,
                                                    int64_t step, std::chrono::seconds timeout);

// Expects the job's status `job` to show one member left out as hung (and
// not as unreachable): worker `index` of the cluster, hung at step
// `at_least` or later; and `herd status` to name it under "Hung:".
void ExpectShownAsHung(LocalCluster& cluster, const std::string& id, const nlohmann::json& job, int index,
                       int64_t at_least);

// The contents of every file in `dir` (the sample ledgers of all workers),
// or with `job_id` of that job's files only.
std::vector<std::string> ReadLedgers(const std::string& dir, const std::string& job_id = "");

// Replays the sample ledgers in `dir` and expects each of `samples` samples
// in each of `epochs` epochs exactly once in the history that stayed (steps a
// later generation re-ran dropped). Returns the replay for further checks.
LedgerReplay ExpectEachSampleOnce(const std::string& dir, size_t epochs, int64_t samples,
                                  const std::string& job_id = "");

// 0, 1, ..., n-1.
std::vector<int64_t> Iota(int64_t n);

// How often `needle` occurs in `text`.
int Count(const std::string& text, const std::string& needle);

// A fresh folder for this test's sample ledgers.
std::string NewLedgerDir();

}  // namespace herd::testing
