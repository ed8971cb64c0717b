#include "worker/train/generation/data_plane_audit.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

namespace herd {
namespace {

TEST(DataPlaneAudit, PeerHostDropsThePort) {
  EXPECT_EQ(PeerHost("10.1.2.3:45678"), "10.1.2.3");
  EXPECT_EQ(PeerHost("[::1]:80"), "::1");
  EXPECT_EQ(PeerHost("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(PeerHost("fe80::1"), "fe80::1");
}

TEST(DataPlaneAudit, TheLineNamesPeerReasonAndGeneration) {
  RejectedConnection rejected{"10.1.2.3:45678", RejectReason::kBadMac, "proof does not match"};
  const std::string line = DataPlaneAuditLine(rejected, 7, 1);
  EXPECT_EQ(line.rfind("audit: data-plane connection from 10.1.2.3:45678 refused (bad_mac)", 0), 0u) << line;
  EXPECT_NE(line.find("generation 7, rank 1"), std::string::npos) << line;
}

TEST(DataPlaneAudit, CountsByReasonAndPeerHost) {
  prometheus::Registry registry;
  DataPlaneAudit audit(registry, "job-1", "w0");
  audit.Record({"10.0.0.9:1000", RejectReason::kTimeout, ""}, 3, 0);
  audit.Record({"10.0.0.9:1001", RejectReason::kTimeout, ""}, 3, 0);  // another port, same series
  audit.Record({"10.0.0.9:1002", RejectReason::kBadMagic, ""}, 3, 0);
  std::map<std::string, double> counts;
  for (const auto& family : registry.Collect()) {
    if (family.name != "herd_data_plane_refused_connections_total") continue;
    for (const auto& metric : family.metric) {
      std::map<std::string, std::string> labels;
      for (const auto& label : metric.label) labels[label.name] = label.value;
      EXPECT_EQ(labels["job"], "job-1");
      EXPECT_EQ(labels["worker"], "w0");
      EXPECT_EQ(labels["rank"], "0");
      EXPECT_EQ(labels["peer"], "10.0.0.9");
      counts[labels["reason"]] = metric.counter.value;
    }
  }
  EXPECT_EQ(counts, (std::map<std::string, double>{{"bad_magic", 1}, {"timeout", 2}}));
}

}  // namespace
}  // namespace herd
