// Tests only: runs `world` Gloo ranks as threads of one process, connected
// through an in-memory rendezvous store, and calls `body(rank, comm)` on each.
#pragma once

#include <functional>
#include <mutex>

#include "worker/comm/communicator.h"

namespace herd {

void RunGlooRanks(int world, const std::function<void(int rank, Communicator* comm)>& body);

// Rank threads share one process, and the BLAS herd installs (Debian's serial
// OpenBLAS, one thread per trainer process) is not safe to call from two
// threads at once: concurrent matmuls return wrong values now and then. Hold
// this around LibTorch compute (forward and backward) in rank bodies; real
// trainers are separate processes and need nothing of the kind. Collectives
// must run outside it (a rank waiting in one while holding it would block
// the others).
std::mutex& RankComputeMutex();

}  // namespace herd
