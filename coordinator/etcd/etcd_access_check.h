// The start-up check of what etcd lets this coordinator do, so that a
// misconfigured user stops the start with a clear message instead of a
// coordinator that campaigns forever or fails mid-write: a wrong password,
// an etcd that requires a user where none is given, and a user whose role
// may not read or write the key prefix.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "coordinator/etcd/etcd_client.h"

namespace herd::coordinator {

// Reads under `prefix` and makes a transaction that would write and delete
// there, but whose condition never holds: etcd checks the permissions of
// both and applies nothing. OK when both pass, and when no member answers
// (an etcd that is down is waited for, not refused). Errors name the user,
// the endpoint and, for a missing permission, the prefix.
absl::Status CheckEtcdAccess(EtcdClient& client, const std::string& prefix);

}  // namespace herd::coordinator
