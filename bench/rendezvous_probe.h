// One job's rendezvous as the benchmark drives it: submit a job through
// JobService, then have its members call JoinGeneration all at once, as their
// trainers would, and time submit -> every member has its answer's bytes.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/herd.grpc.pb.h"

namespace herd::bench {

struct RendezvousResult {
  std::string job_id;
  double submit_s = 0;         // SubmitJob round trip
  double all_joined_s = 0;     // SubmitJob sent -> the last JoinGeneration answered
  std::vector<double> join_s;  // each JoinGeneration, from its own send
  int failed = 0;              // joins that did not return OK or parse
  // The answers as their bytes arrived, until CheckRendezvousAnswers.
  std::vector<grpc::ByteBuffer> answers;
  double parse_s = 0;  // CheckRendezvousAnswers parsing them
  std::string first_error;
  bool ranks_ok = false;  // one generation, world_size == members, ranks 0..W-1 once each (CheckRendezvousAnswers)
};

// The smallest valid job asking for exactly `members` CPU workers.
v1::JobSpec RendezvousJobSpec(int members);

// Submits the job, then sends JoinGeneration for each of `member_ids` (the
// workers the scheduler will pick) right after SubmitJob returns.
absl::StatusOr<RendezvousResult> RunRendezvous(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                               const std::vector<std::string>& member_ids,
                                               std::chrono::milliseconds wait);

// Parses the answers and sets ranks_ok (and failed for any that does not
// parse). Apart from RunRendezvous so that it runs after every timed window:
// a member parses its own answer on its own machine, and parsing 1000
// answers of 1000 peers here, on the cores the coordinator runs on, would
// time this process rather than the coordinator.
void CheckRendezvousAnswers(RendezvousResult& result, size_t members);

}  // namespace herd::bench
