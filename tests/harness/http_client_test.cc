#include "tests/harness/http_client.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <memory>

namespace herd::testing {
namespace {

TEST(HttpGet, FetchesAMetricsPage) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("probe_total").Help("A probe.").Register(*registry).Add({}).Increment(3);
  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(registry);
  const std::string address = "127.0.0.1:" + std::to_string(exposer.GetListeningPorts().at(0));

  auto page = HttpGet(address, "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("probe_total 3"), std::string::npos) << page->body;
  EXPECT_EQ(page->body.find("HTTP/"), std::string::npos) << "headers leaked into the body";

  auto missing = HttpGet(address, "/nothing-here");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, 404);
}

TEST(HttpGet, NothingListeningIsAnError) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  EXPECT_FALSE(HttpGet("127.0.0.1:" + std::to_string(port), "/").ok());
  EXPECT_FALSE(HttpGet("no-port", "/").ok());
}

TEST(UrlEncode, KeepsUnreservedAndEscapesTheRest) {
  EXPECT_EQ(UrlEncode("sum(rate(x{job=\"a-1\"}[5s]))"), "sum%28rate%28x%7Bjob%3D%22a-1%22%7D%5B5s%5D%29%29");
  EXPECT_EQ(UrlEncode("a b+c~_."), "a%20b%2Bc~_.");
}

}  // namespace
}  // namespace herd::testing
