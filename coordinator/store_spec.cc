#include "coordinator/store_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace herd::coordinator {

absl::StatusOr<StoreSpec> ParseStoreSpec(const std::string& flag) {
  StoreSpec spec;
  if (absl::StartsWith(flag, "sqlite:")) {
    spec.sqlite_path = flag.substr(7);
    if (spec.sqlite_path.empty()) return absl::InvalidArgumentError("--store=sqlite: needs a database path");
    return spec;
  }
  if (absl::StartsWith(flag, "etcd://")) {
    spec.kind = StoreSpec::Kind::kEtcd;
    for (absl::string_view endpoint : absl::StrSplit(flag.substr(7), ',')) {
      const size_t colon = endpoint.rfind(':');
      int port = 0;
      if (colon == absl::string_view::npos || colon == 0 || !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) ||
          port <= 0 || port > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("--store: etcd endpoint \"", endpoint, "\" is not HOST:PORT (in \"", flag, "\")"));
      }
      spec.etcd_endpoints.emplace_back(endpoint);
    }
    return spec;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--store=\"", flag, "\": expected sqlite:PATH or etcd://HOST:PORT[,HOST:PORT...]"));
}

absl::StatusOr<std::string> NormalizeEtcdPrefix(const std::string& flag) {
  if (flag.empty() || flag == "/") {
    return absl::InvalidArgumentError("--etcd-prefix must name a key prefix of its own, e.g. /herd/");
  }
  std::string prefix = flag;
  if (prefix.front() != '/') prefix.insert(prefix.begin(), '/');
  if (prefix.back() != '/') prefix.push_back('/');
  return prefix;
}

}  // namespace herd::coordinator
