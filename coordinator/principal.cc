#include "coordinator/principal.h"

namespace herd::coordinator {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kUser:
      return "user";
    case Role::kWorker:
      return "worker";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

bool Principal::SpeaksFor(const std::string& worker_id) const {
  if (role == Role::kAdmin) return true;
  if (role != Role::kWorker) return false;
  for (const std::string& pattern : worker_ids) {
    if (!pattern.empty() && pattern.back() == '*') {
      if (worker_id.compare(0, pattern.size() - 1, pattern, 0, pattern.size() - 1) == 0) return true;
    } else if (pattern == worker_id) {
      return true;
    }
  }
  return false;
}

Principal AnonymousAdmin() { return Principal{"anonymous", Role::kAdmin, {}}; }

}  // namespace herd::coordinator
