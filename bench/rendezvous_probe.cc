#include "bench/rendezvous_probe.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

#include <set>

#include "absl/strings/str_cat.h"

namespace herd::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr char kJoinMethod[] = "/herd.v1.ClusterService/JoinGeneration";

// Each answer is kept as the bytes that arrived (CheckRendezvousAnswers).
struct Join {
  grpc::ClientContext context;
  grpc::ByteBuffer answer;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  SteadyClock::time_point sent;
};

bool ParseAnswer(const grpc::ByteBuffer& bytes, v1::JoinGenerationResponse* response) {
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) return false;
  std::string serialized;
  for (const grpc::Slice& slice : slices) serialized.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return response->ParseFromString(serialized);
}

}  // namespace

v1::JobSpec RendezvousJobSpec(int members) {
  v1::JobSpec spec;
  spec.set_name("bench-rendezvous");
  spec.mutable_model()->set_name("mlp");
  spec.mutable_dataset()->set_kind(v1::DATASET_KIND_SYNTHETIC);
  spec.set_batch_size(32);
  spec.set_max_steps(1);
  spec.set_min_workers(members);
  spec.set_max_workers(members);
  spec.set_device(v1::DEVICE_CPU);
  return spec;
}

absl::StatusOr<RendezvousResult> RunRendezvous(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                                               const std::vector<std::string>& member_ids,
                                               std::chrono::milliseconds wait) {
  RendezvousResult result;
  auto jobs = v1::JobService::NewStub(channels.front());
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  for (const auto& channel : channels) stubs.push_back(std::make_unique<grpc::GenericStub>(channel));
  const auto deadline = std::chrono::system_clock::now() + wait + std::chrono::seconds(10);

  grpc::ClientContext submit_context;
  submit_context.set_deadline(deadline);
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = RendezvousJobSpec(static_cast<int>(member_ids.size()));
  v1::SubmitJobResponse submitted;
  const auto start = SteadyClock::now();
  grpc::Status status = jobs->SubmitJob(&submit_context, submit, &submitted);
  result.submit_s = Seconds(SteadyClock::now() - start);
  if (!status.ok()) return absl::UnavailableError(absl::StrCat("SubmitJob: ", status.error_message()));
  result.job_id = submitted.job().id();

  // All joins go out at once, as the members' trainers would start together.
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<Join>> joins;
  for (size_t i = 0; i < member_ids.size(); ++i) {
    auto join = std::make_unique<Join>();
    join->context.set_deadline(deadline);
    v1::JoinGenerationRequest request;
    request.set_job_id(result.job_id);
    request.set_worker_id(member_ids[i]);
    request.set_wait_ms(wait.count());
    const std::string serialized = request.SerializeAsString();
    grpc::Slice slice(serialized);
    grpc::ByteBuffer request_bytes(&slice, 1);
    join->sent = SteadyClock::now();
    join->reader = stubs[i % stubs.size()]->PrepareUnaryCall(&join->context, kJoinMethod, request_bytes, &queue);
    join->reader->StartCall();
    join->reader->Finish(&join->answer, &join->status, join.get());
    joins.push_back(std::move(join));
  }
  for (size_t answered = 0; answered < joins.size(); ++answered) {
    void* tag = nullptr;
    bool ok = false;
    if (!queue.Next(&tag, &ok)) break;
    Join* join = static_cast<Join*>(tag);
    const auto now = SteadyClock::now();
    result.join_s.push_back(Seconds(now - join->sent));
    result.all_joined_s = Seconds(now - start);
    if (!join->status.ok() && result.failed++ == 0) result.first_error = join->status.error_message();
  }
  for (auto& join : joins) {
    if (join->status.ok()) result.answers.push_back(join->answer);  // shares the slices
  }
  return result;
}

void CheckRendezvousAnswers(RendezvousResult& result, size_t members) {
  const auto start = SteadyClock::now();
  std::set<int64_t> ranks;
  std::set<int64_t> generations;
  bool sizes_ok = true;
  for (const grpc::ByteBuffer& answer : result.answers) {
    v1::JoinGenerationResponse response;
    if (!ParseAnswer(answer, &response)) {
      if (result.failed++ == 0) result.first_error = "an answer did not parse as JoinGenerationResponse";
      continue;
    }
    ranks.insert(response.rank());
    generations.insert(response.generation());
    sizes_ok = sizes_ok && response.world_size() == static_cast<int64_t>(members) &&
               response.peers_size() == static_cast<int>(members);
  }
  result.answers.clear();
  result.parse_s = Seconds(SteadyClock::now() - start);
  result.ranks_ok = result.failed == 0 && sizes_ok && generations.size() == 1 && ranks.size() == members &&
                    *ranks.begin() == 0 && *ranks.rbegin() == static_cast<int64_t>(members) - 1;
}

}  // namespace herd::bench
