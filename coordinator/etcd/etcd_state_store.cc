#include "coordinator/etcd/etcd_state_store.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/etcd/stored_row.h"
#include "coordinator/state_tables.h"

namespace herd::coordinator {
namespace {

// Keys per Range page while loading: a few MiB at most.
constexpr int64_t kLoadPageKeys = 1000;

void AddPut(etcdserverpb::TxnRequest& txn, const KeyValue& put) {
  etcdserverpb::PutRequest* request = txn.add_success()->mutable_request_put();
  request->set_key(put.key);
  request->set_value(put.value);
}

}  // namespace

EtcdStateStore::EtcdStateStore(std::shared_ptr<EtcdClient> client, std::string prefix, TxnLimits limits)
    : client_(std::move(client)), prefix_(std::move(prefix)), limits_(limits) {}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdStateStore::FencedTxn(etcdserverpb::TxnRequest request) {
  if (fence_.has_value()) {
    etcdserverpb::TxnRequest fenced;
    etcdserverpb::Compare* compare = fenced.add_compare();
    compare->set_key(fence_->key);
    compare->set_target(etcdserverpb::Compare::CREATE);
    compare->set_result(etcdserverpb::Compare::EQUAL);
    compare->set_create_revision(fence_->create_revision);
    fenced.mutable_compare()->MergeFrom(request.compare());
    *fenced.mutable_success() = request.success();
    fenced.add_failure()->mutable_request_range()->set_key(fence_->key);
    request = std::move(fenced);
  }
  absl::StatusOr<etcdserverpb::TxnResponse> response = client_->Txn(request);
  if (!response.ok() || response->succeeded() || !fence_.has_value()) return response;
  const etcdserverpb::RangeResponse& leader = response->responses(0).response_range();
  const int64_t now_created = leader.kvs_size() == 0 ? 0 : leader.kvs(0).create_revision();
  if (now_created != fence_->create_revision) {
    if (on_refused_) on_refused_();
    return absl::FailedPreconditionError(absl::StrCat(
        "not the leader any more: write refused (leader key ", fence_->key, " created at revision ",
        fence_->create_revision, " by this coordinator is ",
        now_created == 0 ? std::string("gone") : absl::StrCat("now from revision ", now_created), ")"));
  }
  return response;
}

absl::Status EtcdStateStore::PutAll(std::vector<KeyValue> puts) {
  auto batches = SplitIntoTxns(std::move(puts), limits_);
  if (!batches.ok()) return batches.status();
  for (const std::vector<KeyValue>& batch : *batches) {
    etcdserverpb::TxnRequest txn;
    for (const KeyValue& put : batch) AddPut(txn, put);
    auto response = FencedTxn(std::move(txn));
    if (!response.ok()) return response.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterState> EtcdStateStore::Load(double now) {
  ClusterState state;
  // Checkpoint rows with the revision that created them: commit order.
  std::vector<std::pair<int64_t, v1::CheckpointInfo>> checkpoints;
  etcdserverpb::RangeRequest page;
  page.set_key(prefix_);
  page.set_range_end(PrefixRangeEnd(prefix_));
  page.set_limit(kLoadPageKeys);
  while (true) {
    auto response = client_->Range(page);
    if (!response.ok()) return response.status();
    // Every page at the first page's revision: one consistent snapshot.
    if (page.revision() == 0) page.set_revision(response->header().revision());
    for (const mvccpb::KeyValue& kv : response->kvs()) {
      absl::string_view name = kv.key();
      name.remove_prefix(prefix_.size());
      if (absl::ConsumePrefix(&name, "jobs/")) {
        JobRecord job;
        if (auto status = DecodeRow(JobsTable(), kv.value(), kv.key(), &job); !status.ok()) return status;
        state.next_submit_seq = std::max(state.next_submit_seq, job.submit_seq + 1);
        const std::string id = job.info.id();
        state.jobs[id] = std::move(job);
      } else if (absl::ConsumePrefix(&name, "workers/")) {
        WorkerRecord worker;
        if (auto status = DecodeRow(WorkersTable(), kv.value(), kv.key(), &worker); !status.ok()) return status;
        worker.last_heartbeat = now;
        const std::string id = worker.id;
        state.workers[id] = std::move(worker);
      } else if (absl::ConsumePrefix(&name, "checkpoints/")) {
        StoredCheckpoint checkpoint;
        if (auto status = DecodeRow(CheckpointsTable(), kv.value(), kv.key(), &checkpoint); !status.ok()) {
          return status;
        }
        checkpoints.emplace_back(kv.create_revision(), std::move(checkpoint.info));
      }
      // Other keys under the prefix (the leader key) are not state.
    }
    if (!response->more() || response->kvs_size() == 0) break;
    page.set_key(response->kvs(response->kvs_size() - 1).key() + std::string(1, '\0'));
  }
  std::stable_sort(checkpoints.begin(), checkpoints.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [revision, info] : checkpoints) state.checkpoints[info.job_id()].push_back(std::move(info));
  return state;
}

absl::Status EtcdStateStore::Save(const ClusterState& state, const ChangeSet& changes) {
  if (changes.empty()) return absl::OkStatus();
  // Workers first, jobs last (see the header): a job's record is written
  // only once every record its change touched is.
  std::vector<KeyValue> puts;
  for (const std::string& id : changes.workers) {
    auto it = state.workers.find(id);
    if (it != state.workers.end()) puts.push_back({WorkerKey(id), EncodeRow(WorkersTable(), it->second)});
  }
  for (const std::string& id : changes.jobs) {
    auto it = state.jobs.find(id);
    if (it != state.jobs.end()) puts.push_back({JobKey(id), EncodeRow(JobsTable(), it->second)});
  }
  return PutAll(std::move(puts));
}

absl::Status EtcdStateStore::SaveCheckpoint(const v1::CheckpointInfo& added,
                                            const std::vector<v1::CheckpointInfo>& dropped) {
  const KeyValue put{CheckpointKey(added.id()), EncodeRow(CheckpointsTable(), StoredCheckpoint{added, 0})};
  etcdserverpb::TxnRequest txn;
  // An id already stored is an error, as in SQLite: the add happens only
  // where the key has never been created.
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key(put.key);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  AddPut(txn, put);
  // Retention drops a few at a time; more than fit go in later transactions.
  std::vector<std::string> deletes;
  for (const v1::CheckpointInfo& old : dropped) deletes.push_back(CheckpointKey(old.id()));
  size_t in_first = std::min(deletes.size(), limits_.max_ops - 1);
  for (size_t i = 0; i < in_first; ++i) txn.add_success()->mutable_request_delete_range()->set_key(deletes[i]);
  auto response = FencedTxn(std::move(txn));
  if (!response.ok()) return response.status();
  if (!response->succeeded()) {
    // Written by a call whose answer was lost (the client retried it on
    // another member)? Then it is done; else the id is taken.
    etcdserverpb::RangeRequest get;
    get.set_key(put.key);
    auto existing = client_->Range(get);
    if (!existing.ok()) return existing.status();
    if (existing->kvs_size() == 0 || existing->kvs(0).value() != put.value) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint ", added.id(), " is already stored in etcd"));
    }
  }
  for (size_t first = in_first; first < deletes.size(); first += limits_.max_ops) {
    etcdserverpb::TxnRequest more;
    for (size_t i = first; i < std::min(deletes.size(), first + limits_.max_ops); ++i) {
      more.add_success()->mutable_request_delete_range()->set_key(deletes[i]);
    }
    if (auto done = FencedTxn(std::move(more)); !done.ok()) return done.status();
  }
  return absl::OkStatus();
}

}  // namespace herd::coordinator
