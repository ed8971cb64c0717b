// A rank that has waited on its peers for half the collective timeout says
// so in its generation's KV on the coordinator: "waiting/<rank>" is
// "waiting" while such a wait lasts and "moving" once it ended well.
//
// Why: a collective timeout on Gloo or NCCL names nobody, and neither does
// a rank's wait on a hung peer. The roll call (roll_call.h) tells the hung
// rank from the ranks that waited for it. Without this mark it could only
// wait, after the timeout, for every live rank to answer, and it had to
// wait long enough for the skew between the ranks' timeouts: a window that
// a hung rank always spent in full (2 s of a 30 s timeout). With the mark
// the evidence is there when the timeout fires: every rank stuck in the
// same collective (directly, or behind a peer stuck in it) began waiting
// within that skew of the rank that timed out, so it posted its mark half
// a timeout before; a rank that did not is not waiting on anyone. It hangs
// (a stopped process, a stuck disk read: its trainer never reached the
// collective), or it is a straggler more than half the timeout behind its
// peers, which a timeout blames just as the TCP mesh's does.
//
// Waits are what a rank blocks on its peers for: each collective from its
// issue until its Wait() returns, and the forming of the generation's
// communicators. A collective that has finished well but is not yet
// waited for (an overlapped round the step loop collects later) is no
// longer waiting on anyone: it posts nothing, and a mark it posted is
// cleared (the marker looks again every quarter of `after` while its mark
// is up). A long wait that ends well clears the mark, so a rank that
// waited once and hangs later, outside any collective, is not taken for
// alive. A wait that failed leaves the mark: the rank is alive and answers
// the roll call next. A post the coordinator did not take is tried again.
//
// The mark costs nothing on the training path: a wait begins and ends
// under a mutex, and the marker's thread wakes once per `after` (four times
// as often while its mark is up), never per collective. NCCL ranks post no
// marks (a captured CUDA graph replays its collectives without the
// communicator), so their roll calls keep waiting for answers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "worker/comm/communicator.h"

namespace herd {

// The KV key rank `rank` posts its mark under, and the mark's values.
std::string WaitingMarkKey(int rank);
inline constexpr char kWaitingMark[] = "waiting";
inline constexpr char kMovingMark[] = "moving";

// How long a wait lasts before it is marked: half the collective timeout.
// Early enough that a rank which began waiting up to half a timeout after
// the first one to time out has posted by then; late enough that a healthy
// job, whose collectives take far less, posts nothing.
std::chrono::milliseconds WaitingMarkAfter(std::chrono::milliseconds collective_timeout);

// Whether a job's ranks post marks: CPU collectives among several ranks.
bool PostsWaitingMarks(bool on_cuda, int world_size);

// What the marker knows, and what it does next (a pure function of it).
struct WaitingMarkState {
  using Time = std::chrono::steady_clock::time_point;
  std::optional<Time> oldest_wait;  // when the longest wait still in flight began
  bool failed = false;              // a wait failed: the mark stays as it is
  bool posted = false;              // the KV holds "waiting"
  std::optional<Time> retry_at;     // a post that failed is tried again from then
};
struct WaitingMarkStep {
  // Post "waiting" (true) or "moving" (false); nothing when unset.
  std::optional<bool> post;
  // Otherwise, when to look again: one `after` from the oldest wait (from
  // now with none), so a wait that begins later is seen in time; a quarter
  // `after` from now while the mark is up, so a long collective that
  // finished unwaited clears it; the retry time of a failed post. Unset
  // once a wait failed: the mark stays as it is.
  std::optional<WaitingMarkState::Time> wake;
};
// How long a failed post waits before it is tried again, and how often a
// posted mark is looked at: a quarter of `after`.
std::chrono::milliseconds WaitingMarkRecheck(std::chrono::milliseconds after);
WaitingMarkStep NextWaitingMarkStep(const WaitingMarkState& state, WaitingMarkState::Time now,
                                    std::chrono::milliseconds after);

// Keeps rank `rank`'s mark in `store` (the generation's) from the waits it
// is told of; a thread of its own posts it.
class WaitingMarker {
 public:
  // `on_mark`, where given, is called (on the marker's thread) each time
  // the mark goes up: a wait lasted `after`.
  WaitingMarker(std::shared_ptr<RendezvousStore> store, int rank, std::chrono::milliseconds after,
                std::function<void()> on_mark = {});
  ~WaitingMarker();
  WaitingMarker(const WaitingMarker&) = delete;
  WaitingMarker& operator=(const WaitingMarker&) = delete;

  // What a wait waits for: nullopt while it is in flight, then whether it
  // ended well.
  using Outcome = std::function<std::optional<bool>()>;
  // A wait begins; End it once with whether it ended well. `outcome`, where
  // given, tells early that what it waits for is over (a collective Done()
  // but not yet waited for): ended well, it no longer counts towards a mark;
  // failed, the mark stays. It is asked on the marker's thread, under its
  // lock.
  uint64_t Begin(Outcome outcome = {});
  void End(uint64_t wait, bool ok);

 private:
  struct Wait {
    WaitingMarkState::Time began;
    Outcome outcome;
  };
  void Run();
  // The start of the oldest wait still in flight; a wait found failed
  // sets state_.failed.
  std::optional<WaitingMarkState::Time> OldestInFlight();

  const std::shared_ptr<RendezvousStore> store_;
  const int rank_;
  const std::chrono::milliseconds after_;
  const std::function<void()> on_mark_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<uint64_t, Wait> waits_;  // by id: ids rise with time, so the first is the oldest
  uint64_t next_id_ = 1;
  WaitingMarkState state_;
  bool stop_ = false;
  std::thread thread_;
};

// `inner` whose every collective is a wait told to `marker`, from its issue
// until its Work is waited for (or dropped). Both must outlive it; its
// Works must not outlive `marker`. CPU communicators only: the marker asks
// a finished collective's Wait() for its outcome, which returns at once
// there (NCCL's Wait() also orders the compute stream).
std::unique_ptr<Communicator> MarkWaitsOf(Communicator* inner, WaitingMarker* marker);

}  // namespace herd
