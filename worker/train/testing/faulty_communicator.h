// Tests only: a Communicator that passes collectives to a real one until a
// chosen call, then fails that call and every later one, after running a
// callback (where a test changes membership, as a coordinator would on
// noticing the fault). All ranks issue the same collectives in the same
// order, so "the Nth call" is the same collective on every rank.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "worker/comm/forwarding_communicator.h"

namespace herd {

class FaultyCommunicator : public ForwardingCommunicator {
 public:
  // Fails calls number `fail_at` (1-based) and after with `failure`.
  FaultyCommunicator(std::unique_ptr<Communicator> inner, int64_t fail_at, absl::Status failure,
                     std::function<void()> on_fail);

 protected:
  // Each collective is one call: the failed Work at or past the fault,
  // else the inner communicator's.
  std::shared_ptr<Work> Issue(Issuer issue) override;

 private:
  // The failed Work when this call is at or past the fault, else null.
  std::shared_ptr<Work> Fault();

  const std::unique_ptr<Communicator> owned_;  // what the calls go to
  const int64_t fail_at_;
  const absl::Status failure_;
  std::function<void()> on_fail_;
  std::atomic<int64_t> calls_{0};  // backward hooks may launch from autograd threads
};

}  // namespace herd
