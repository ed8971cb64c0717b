// Tests only: runs `world` Gloo ranks as threads of one process, connected
// through an in-memory rendezvous store, and calls `body(rank, comm)` on each.
#pragma once

#include <functional>

#include "worker/comm/communicator.h"

namespace herd {

void RunGlooRanks(int world, const std::function<void(int rank, Communicator* comm)>& body);

}  // namespace herd
