// A minimal HTTP/1.0 GET over loopback TCP for tests: enough to scrape
// /metrics pages and to call Prometheus' HTTP API. No TLS, no redirects,
// no chunked bodies (HTTP/1.0 responses are never chunked).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace herd::testing {

struct HttpResponse {
  int status = 0;  // e.g. 200
  std::string body;
};

// GET http://<address><target>; `address` is host:port, `target` starts with '/'.
absl::StatusOr<HttpResponse> HttpGet(const std::string& address, const std::string& target,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Percent-encodes a query parameter value (RFC 3986 unreserved kept).
std::string UrlEncode(const std::string& value);

// A loopback TCP port that was free a moment ago.
int FreeLoopbackPort();

}  // namespace herd::testing
