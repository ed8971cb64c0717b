// How a generation's member key reaches its members (docs/security.md,
// "Member authentication on the TCP mesh"): rank 0 makes a fresh
// key and writes it to the generation's rendezvous store, which only the
// generation's members can read; every other rank reads it there.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/tcp_mesh_handshake.h"

namespace herd {

// The store key under `key_prefix` (the generation's kv_prefix).
std::string MemberKeyStoreKey(const std::string& key_prefix);

// Rank 0: makes and publishes the key; others: wait up to `timeout` for it
// (DEADLINE_EXCEEDED when rank 0 never published). A stored value of the
// wrong size is INVALID_ARGUMENT naming the store key.
absl::StatusOr<MemberKey> ShareMemberKey(RendezvousStore& store, const std::string& key_prefix, int rank,
                                         std::chrono::milliseconds timeout);

}  // namespace herd
