#include "coordinator/log_relay.h"

#include <gtest/gtest.h>

#include <thread>

namespace herd::coordinator {
namespace {

v1::LogRequest Ask(const std::string& job) {
  v1::LogRequest request;
  request.set_job_id(job);
  return request;
}

// Reads the session to its end; returns the bytes and sets `end`.
std::string ReadAll(LogSession& session, absl::Status* end) {
  std::string out;
  while (true) {
    LogSession::Item item = session.Next(absl::Seconds(30));
    if (item.data) out += *item.data;
    if (item.end) {
      *end = *item.end;
      return out;
    }
  }
}

TEST(LogRelayTest, OpeningWithoutAListeningDaemonNamesTheWorker) {
  LogRelay relay;
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_EQ(session.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(session.status().message().find("w1"), std::string::npos);
}

TEST(LogRelayTest, ARequestReachesTheWorkerAndItsUploadReachesTheReaderInOrder) {
  LogRelay relay;
  int64_t listener = relay.Listen("w1");
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  std::optional<v1::LogRequest> ask = relay.NextRequest("w1", listener, absl::Seconds(1));
  ASSERT_TRUE(ask.has_value());
  EXPECT_EQ(ask->job_id(), "job-1");
  EXPECT_EQ(ask->session(), (*session)->id());

  std::thread uploader([&] {
    auto attached = relay.Attach(ask->session(), "w1");
    ASSERT_TRUE(attached.ok()) << attached.status();
    // More than the buffer holds: the uploader waits for the reader.
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE((*attached)->Push(std::string(2048, 'a' + i % 26)));
    (*attached)->Finish(absl::OkStatus());
  });
  absl::Status end;
  std::string got = ReadAll(**session, &end);
  uploader.join();
  EXPECT_TRUE(end.ok()) << end;
  ASSERT_EQ(got.size(), 1000u * 2048);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(got[i * 2048], 'a' + i % 26) << "chunk " << i << " out of order";
  relay.Close(*session);
}

TEST(LogRelayTest, OnlyTheAskedWorkerMayAttachAndOnlyOnce) {
  LogRelay relay;
  relay.Listen("w1");
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(relay.Attach((*session)->id(), "w2").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(relay.Attach((*session)->id(), "w1").ok());
  EXPECT_EQ(relay.Attach((*session)->id(), "w1").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(relay.Attach("log-999", "w1").status().code(), absl::StatusCode::kNotFound);
}

TEST(LogRelayTest, AReaderThatLeavesStopsTheUploader) {
  LogRelay relay;
  relay.Listen("w1");
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  auto attached = relay.Attach((*session)->id(), "w1");
  ASSERT_TRUE(attached.ok());
  std::thread uploader([&] {
    // Blocks once the buffer is full, until the reader leaves.
    while ((*attached)->Push(std::string(4096, 'x'))) {
    }
  });
  ASSERT_TRUE((*session)->Next(absl::Seconds(30)).data.has_value());
  relay.Close(*session);
  uploader.join();  // would hang if the abandoned session kept blocking
  EXPECT_EQ(relay.Attach((*session)->id(), "w1").status().code(), absl::StatusCode::kNotFound);
}

TEST(LogRelayTest, ADaemonThatNeverAnswersEndsTheReadWithDeadlineExceeded) {
  LogRelay relay(LogRelayOptions{.attach_timeout = absl::Milliseconds(50)});
  relay.Listen("w1");
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  absl::Status end;
  EXPECT_EQ(ReadAll(**session, &end), "");
  EXPECT_EQ(end.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(end.message().find("w1"), std::string::npos);
}

TEST(LogRelayTest, ANewerStreamOfTheSameWorkerTakesTheRequests) {
  LogRelay relay;
  int64_t old_listener = relay.Listen("w1");
  int64_t new_listener = relay.Listen("w1");
  EXPECT_FALSE(relay.Listening("w1", old_listener));
  ASSERT_TRUE(relay.Open("w1", Ask("job-1")).ok());
  EXPECT_FALSE(relay.NextRequest("w1", old_listener, absl::Milliseconds(1)).has_value());
  EXPECT_TRUE(relay.NextRequest("w1", new_listener, absl::Milliseconds(1)).has_value());
  relay.StopListening("w1", old_listener);  // the old stream's exit leaves the new one alone
  EXPECT_TRUE(relay.Listening("w1", new_listener));
}

}  // namespace
}  // namespace herd::coordinator
