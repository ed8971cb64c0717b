// Who is calling: a principal from the auth file (or from a client
// certificate), its role, and the worker ids a worker credential speaks for.
#pragma once

#include <string>
#include <vector>

namespace herd::coordinator {

enum class Role {
  kUser,    // people: JobService; cancels only their own jobs
  kWorker,  // worker daemons and their trainers: ClusterService, own ids only
  kAdmin,   // both services, any job, any worker id
};

// "user", "worker", "admin".
const char* RoleName(Role role);

struct Principal {
  std::string name;
  Role role = Role::kUser;
  // kWorker: the ids it may act as; an entry ending in '*' matches every id
  // with that prefix ("gpu-*").
  std::vector<std::string> worker_ids;

  // Whether this principal may act as worker `worker_id` (admins: any).
  bool SpeaksFor(const std::string& worker_id) const;
};

// The caller when auth is disabled (--insecure-no-auth): may do anything.
Principal AnonymousAdmin();

}  // namespace herd::coordinator
