#include "coordinator/log_relay.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace herd::coordinator {
namespace {

v1::LogRequest Ask(const std::string& job) {
  v1::LogRequest request;
  request.set_job_id(job);
  return request;
}

// A daemon's request stream: keeps what the relay hands it.
class RecordingSink : public LogRequestSink {
 public:
  void Send(v1::LogRequest request) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(std::move(request));
  }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    end_ = status;
  }
  std::vector<v1::LogRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  std::optional<absl::Status> end() {
    absl::MutexLock lock(&mu_);
    return end_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::LogRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
};

// An upload as LogUploadStream makes one (Room, Add, woken through OnRoom),
// except that it waits on its own thread where the stream holds none.
class WaitingUploader {
 public:
  explicit WaitingUploader(std::shared_ptr<LogSession> session)
      : session_(std::move(session)), woken_(std::make_shared<Woken>()) {
    // The state is shared: the session may still call a callback it copied.
    session_->OnRoom([woken = woken_] {
      absl::MutexLock lock(&woken->mu);
      ++woken->count;
    });
  }
  // Adds `data` once there is room; false (dropped) once the session is closed.
  bool Push(std::string data) {
    while (true) {
      int64_t seen;
      {
        absl::MutexLock lock(&woken_->mu);
        seen = woken_->count;
      }
      LogSession::Space space = session_->Room();
      if (space.closed) return false;
      if (space.room) {
        session_->Add(std::move(data));
        return true;
      }
      absl::MutexLock lock(&woken_->mu);
      auto woken_since = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(woken_->mu) { return woken_->count != seen; };
      woken_->mu.Await(absl::Condition(&woken_since));
    }
  }

 private:
  struct Woken {
    absl::Mutex mu;
    int64_t count ABSL_GUARDED_BY(mu) = 0;
  };
  std::shared_ptr<LogSession> session_;
  std::shared_ptr<Woken> woken_;
};

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
  auto daemon = std::make_shared<RecordingSink>();
  ASSERT_TRUE(relay.Listen("w1", daemon).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  std::vector<v1::LogRequest> asked = daemon->requests();
  ASSERT_EQ(asked.size(), 1u);  // handed over at once: nobody polls
  const v1::LogRequest* ask = &asked[0];
  EXPECT_EQ(ask->job_id(), "job-1");
  EXPECT_EQ(ask->session(), (*session)->id());

  std::thread uploader([&] {
    auto attached = relay.Attach(ask->session(), "w1");
    ASSERT_TRUE(attached.ok()) << attached.status();
    // More than the buffer holds: the uploader waits for the reader.
    WaitingUploader upload(*attached);
    for (int i = 0; i < 1000; ++i) ASSERT_TRUE(upload.Push(std::string(2048, 'a' + i % 26)));
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
  ASSERT_TRUE(relay.Listen("w1", std::make_shared<RecordingSink>()).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  EXPECT_EQ(relay.Attach((*session)->id(), "w2").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(relay.Attach((*session)->id(), "w1").ok());
  EXPECT_EQ(relay.Attach((*session)->id(), "w1").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(relay.Attach("log-999", "w1").status().code(), absl::StatusCode::kNotFound);
}

TEST(LogRelayTest, AReaderThatLeavesStopsTheUploader) {
  LogRelay relay;
  ASSERT_TRUE(relay.Listen("w1", std::make_shared<RecordingSink>()).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  auto attached = relay.Attach((*session)->id(), "w1");
  ASSERT_TRUE(attached.ok());
  std::thread uploader([&] {
    // Waits once the buffer is full, until the reader leaves.
    WaitingUploader upload(*attached);
    while (upload.Push(std::string(4096, 'x'))) {
    }
  });
  ASSERT_TRUE((*session)->Next(absl::Seconds(30)).data.has_value());
  relay.Close(*session);
  uploader.join();  // would hang if the abandoned session kept blocking
  EXPECT_EQ(relay.Attach((*session)->id(), "w1").status().code(), absl::StatusCode::kNotFound);
}

TEST(LogRelayTest, ADaemonThatNeverAnswersEndsTheReadWithDeadlineExceeded) {
  LogRelay relay(LogRelayOptions{.attach_timeout = absl::Milliseconds(50)});
  ASSERT_TRUE(relay.Listen("w1", std::make_shared<RecordingSink>()).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  absl::Status end;
  EXPECT_EQ(ReadAll(**session, &end), "");
  EXPECT_EQ(end.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(end.message().find("w1"), std::string::npos);
}

TEST(LogRelayTest, ANewerStreamOfTheSameWorkerTakesTheRequests) {
  LogRelay relay;
  auto old_stream = std::make_shared<RecordingSink>();
  auto new_stream = std::make_shared<RecordingSink>();
  ASSERT_TRUE(relay.Listen("w1", old_stream).ok());
  ASSERT_TRUE(relay.Listen("w1", new_stream).ok());
  ASSERT_TRUE(old_stream->end().has_value());
  EXPECT_TRUE(old_stream->end()->ok()) << *old_stream->end();
  ASSERT_TRUE(relay.Open("w1", Ask("job-1")).ok());
  EXPECT_TRUE(old_stream->requests().empty());
  EXPECT_EQ(new_stream->requests().size(), 1u);
  relay.StopListening("w1", old_stream.get());  // the old stream's exit leaves the new one alone
  EXPECT_TRUE(relay.Open("w1", Ask("job-2")).ok());
  EXPECT_EQ(new_stream->requests().size(), 2u);
  EXPECT_FALSE(new_stream->end().has_value());
  relay.StopListening("w1", new_stream.get());
  EXPECT_EQ(relay.Open("w1", Ask("job-3")).status().code(), absl::StatusCode::kUnavailable);
}

TEST(LogRelayTest, ShutdownEndsEveryStreamAndRefusesNewOnes) {
  LogRelay relay;
  auto w1 = std::make_shared<RecordingSink>();
  auto w2 = std::make_shared<RecordingSink>();
  ASSERT_TRUE(relay.Listen("w1", w1).ok());
  ASSERT_TRUE(relay.Listen("w2", w2).ok());
  relay.Shutdown();
  for (const auto& sink : {w1, w2}) {
    ASSERT_TRUE(sink->end().has_value());
    EXPECT_EQ(sink->end()->code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_EQ(relay.Listen("w3", std::make_shared<RecordingSink>()).code(), absl::StatusCode::kUnavailable);
}

// A reader that holds no thread: counts its wake-ups, and lets a test wait
// for the next one.
class WakeCounter {
 public:
  std::function<void()> Callback() {
    return [this] {
      absl::MutexLock lock(&mu_);
      ++wakes_;
    };
  }
  // True once more than `seen` wake-ups came; false after 30 s.
  bool AwaitMoreThan(int seen) {
    absl::MutexLock lock(&mu_);
    auto more = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return wakes_ > seen; };
    return mu_.AwaitWithTimeout(absl::Condition(&more), absl::Seconds(30));
  }
  int wakes() {
    absl::MutexLock lock(&mu_);
    return wakes_;
  }

 private:
  absl::Mutex mu_;
  int wakes_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(LogRelayTest, AReaderThatHoldsNoThreadIsWokenForEachChunkAndTheEnd) {
  LogRelay relay;
  ASSERT_TRUE(relay.Listen("w1", std::make_shared<RecordingSink>()).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  WakeCounter reader;
  (*session)->OnReady(reader.Callback());
  EXPECT_EQ(reader.wakes(), 1);  // at once, for what came before
  LogSession::Item nothing = (*session)->TryNext();
  EXPECT_FALSE(nothing.data.has_value());
  EXPECT_FALSE(nothing.end.has_value());

  auto attached = relay.Attach((*session)->id(), "w1");
  ASSERT_TRUE(attached.ok());
  (*attached)->Add("step 1\n");
  EXPECT_EQ(reader.wakes(), 2);
  (*attached)->Add("step 2\n");
  EXPECT_EQ(reader.wakes(), 3);
  EXPECT_EQ((*session)->TryNext().data, "step 1\n");
  EXPECT_EQ((*session)->TryNext().data, "step 2\n");
  EXPECT_FALSE((*session)->TryNext().data.has_value());
  (*attached)->Finish(absl::OkStatus());
  EXPECT_EQ(reader.wakes(), 4);
  LogSession::Item end = (*session)->TryNext();
  ASSERT_TRUE(end.end.has_value());
  EXPECT_TRUE(end.end->ok()) << *end.end;
  relay.Close(*session);
}

// An uploader holding no thread reads more only while the session has room:
// it is woken when the reader frees room, and when the reader leaves, which
// ends the upload.
TEST(LogRelayTest, AnUploaderThatHoldsNoThreadIsWokenWhenRoomFreesAndWhenTheReaderLeaves) {
  LogRelay relay(LogRelayOptions{.max_buffered_bytes = 8});
  ASSERT_TRUE(relay.Listen("w1", std::make_shared<RecordingSink>()).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  auto attached = relay.Attach((*session)->id(), "w1");
  ASSERT_TRUE(attached.ok());
  WakeCounter uploader;
  (*attached)->OnRoom(uploader.Callback());
  EXPECT_EQ(uploader.wakes(), 1);  // at once, to read the first chunk
  EXPECT_TRUE((*attached)->Room().room);
  (*attached)->Add("step 1\n");
  EXPECT_TRUE((*attached)->Room().room);  // 7 of 8 bytes
  (*attached)->Add("step 2\n");           // taken whole: 14 of 8
  LogSession::Space full = (*attached)->Room();
  EXPECT_FALSE(full.room);
  EXPECT_FALSE(full.closed.has_value());

  // The reader takes a chunk: room again, and the uploader is woken.
  EXPECT_EQ((*session)->TryNext().data, "step 1\n");
  EXPECT_EQ(uploader.wakes(), 2);
  EXPECT_TRUE((*attached)->Room().room);
  EXPECT_EQ((*session)->TryNext().data, "step 2\n");  // there was room already
  EXPECT_EQ(uploader.wakes(), 2);

  // The reader leaves: the uploader is woken to end the upload.
  relay.Close(*session);
  EXPECT_EQ(uploader.wakes(), 3);
  LogSession::Space closed = (*attached)->Room();
  EXPECT_FALSE(closed.room);
  ASSERT_TRUE(closed.closed.has_value());
  EXPECT_EQ(closed.closed->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(closed.closed->message(), "the log reader went away");
  (*attached)->Add("step 3\n");  // dropped
  EXPECT_FALSE((*session)->TryNext().data.has_value());
}

TEST(LogRelayTest, ADaemonThatNeverAnswersWakesAReaderThatHoldsNoThreadWithDeadlineExceeded) {
  LogRelay relay(LogRelayOptions{.attach_timeout = absl::Milliseconds(50)});
  ASSERT_TRUE(relay.Listen("w1", std::make_shared<RecordingSink>()).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  WakeCounter reader;
  (*session)->OnReady(reader.Callback());
  ASSERT_TRUE(reader.AwaitMoreThan(1)) << "the attach timeout woke nobody";
  LogSession::Item item = (*session)->TryNext();
  ASSERT_TRUE(item.end.has_value());
  EXPECT_EQ(item.end->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(item.end->message().find("w1"), std::string::npos) << *item.end;
  // A daemon answering now has nobody to send to.
  auto late = relay.Attach((*session)->id(), "w1");
  ASSERT_TRUE(late.ok());
  EXPECT_EQ((*late)->Room().closed.value_or(absl::OkStatus()).code(), absl::StatusCode::kDeadlineExceeded);
  relay.Close(*session);
}

TEST(LogRelayTest, ShutdownEndsOpenSessionsWithUnavailableAfterTheirChunksAndStopsTheUploads) {
  LogRelay relay;
  ASSERT_TRUE(relay.Listen("w1", std::make_shared<RecordingSink>()).ok());
  auto session = relay.Open("w1", Ask("job-1"));
  ASSERT_TRUE(session.ok());
  WakeCounter reader;
  (*session)->OnReady(reader.Callback());
  auto attached = relay.Attach((*session)->id(), "w1");
  ASSERT_TRUE(attached.ok());
  (*attached)->Add("step 1\n");
  WakeCounter uploader;  // an upload holding no thread
  (*attached)->OnRoom(uploader.Callback());
  const int before = reader.wakes();
  const int uploader_before = uploader.wakes();
  relay.Shutdown();
  EXPECT_GT(reader.wakes(), before);
  EXPECT_GT(uploader.wakes(), uploader_before);
  LogSession::Space closed = (*attached)->Room();
  ASSERT_TRUE(closed.closed.has_value());
  EXPECT_EQ(closed.closed->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(closed.closed->message(), "coordinator is shutting down");
  EXPECT_EQ((*session)->TryNext().data, "step 1\n");
  LogSession::Item end = (*session)->TryNext();
  ASSERT_TRUE(end.end.has_value());
  EXPECT_EQ(end.end->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(end.end->message(), "coordinator is shutting down");
  (*attached)->Add("step 2\n");  // dropped
  (*attached)->Finish(absl::OkStatus());  // the upload's own end comes too late to count
  EXPECT_EQ((*session)->TryNext().end->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(relay.Open("w1", Ask("job-1")).status().code(), absl::StatusCode::kUnavailable);
  relay.Close(*session);
  EXPECT_TRUE(relay.AwaitSessions(0, absl::Seconds(10)));
}

}  // namespace
}  // namespace herd::coordinator
