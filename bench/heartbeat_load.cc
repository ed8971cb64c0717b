#include "bench/heartbeat_load.h"

namespace herd::bench {
namespace {

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

// gRPC takes deadlines on the system clock; the schedule runs on the steady one.
std::chrono::system_clock::time_point ToSystem(SteadyClock::time_point t) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(t - SteadyClock::now());
}

struct Call {
  grpc::ClientContext context;
  v1::HeartbeatResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::HeartbeatResponse>> reader;
  SteadyClock::time_point sent;
  double lag_s = 0;
};

}  // namespace

HeartbeatLoad::HeartbeatLoad(std::vector<std::shared_ptr<grpc::Channel>> channels, std::vector<std::string> worker_ids,
                             HeartbeatLoadOptions options)
    : worker_ids_(std::move(worker_ids)), options_(options) {
  for (auto& channel : channels) stubs_.push_back(v1::ClusterService::NewStub(channel));
}

HeartbeatLoad::~HeartbeatLoad() { Stop(); }

void HeartbeatLoad::Start() {
  started_ = SteadyClock::now();
  samples_.assign(options_.threads, {});
  for (int t = 0; t < options_.threads; ++t) threads_.emplace_back([this, t] { Drive(t); });
}

std::vector<HeartbeatSample> HeartbeatLoad::Stop() {
  stopping_ = true;
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  std::vector<HeartbeatSample> all;
  for (auto& list : samples_) all.insert(all.end(), list.begin(), list.end());
  samples_.clear();
  return all;
}

// Thread t drives workers t, t+T, t+2T, ...; worker i is due at
// i/N * period + k * period, so the whole fleet's calls are evenly spread.
void HeartbeatLoad::Drive(int thread) {
  const int total = static_cast<int>(worker_ids_.size());
  std::vector<int> mine;
  for (int i = thread; i < total; i += options_.threads) mine.push_back(i);
  if (mine.empty()) return;
  const auto period =
      std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(options_.period_s));
  auto due_of = [&](int worker, int64_t round) { return started_ + period * worker / total + period * round; };
  grpc::CompletionQueue queue;
  size_t next = 0;
  int64_t round = 0;
  int64_t in_flight = 0;
  std::vector<HeartbeatSample>& samples = samples_[thread];

  auto handle = [&](void* tag) {
    std::unique_ptr<Call> call(static_cast<Call*>(tag));
    --in_flight;
    const auto now = SteadyClock::now();
    samples.push_back({Seconds(call->sent - started_), Seconds(now - call->sent), call->lag_s,
                       call->status.ok() && !call->response.reregister()});
  };

  while (!stopping_) {
    auto due = due_of(mine[next], round);
    while (SteadyClock::now() >= due && !stopping_) {
      const int worker = mine[next];
      auto call = std::make_unique<Call>();
      call->sent = SteadyClock::now();
      call->lag_s = Seconds(call->sent - due);
      call->context.set_deadline(ToSystem(call->sent + options_.deadline));
      v1::HeartbeatRequest request;
      request.set_worker_id(worker_ids_[worker]);
      auto& stub = stubs_[worker % stubs_.size()];
      call->reader = stub->AsyncHeartbeat(&call->context, request, &queue);
      Call* raw = call.release();
      raw->reader->Finish(&raw->response, &raw->status, raw);
      ++in_flight;
      if (++next == mine.size()) {
        next = 0;
        ++round;
      }
      due = due_of(mine[next], round);
    }
    // Collect answers until the next heartbeat is due.
    void* tag = nullptr;
    bool ok = false;
    while (queue.AsyncNext(&tag, &ok, ToSystem(due)) == grpc::CompletionQueue::GOT_EVENT) handle(tag);
  }
  while (in_flight > 0) {
    void* tag = nullptr;
    bool ok = false;
    if (!queue.Next(&tag, &ok)) break;
    handle(tag);
  }
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) delete static_cast<Call*>(tag);
}

}  // namespace herd::bench
