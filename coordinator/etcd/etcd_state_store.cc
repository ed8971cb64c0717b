#include "coordinator/etcd/etcd_state_store.h"

#include <glog/logging.h>

#include <algorithm>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/etcd/stored_row.h"
#include "coordinator/state_tables.h"

namespace herd::coordinator {
namespace {

// Keys per Range page while loading: a few MiB at most.
constexpr int64_t kLoadPageKeys = 1000;
// A staged write's framing in its chunk (tags and lengths), at most.
constexpr size_t kStagedWriteOverhead = 16;
// Left free in the last chunk's transaction for the commit value and key.
constexpr size_t kStagedCommitRoom = 4096;

void AddPut(etcdserverpb::TxnRequest& txn, const KeyValue& put) {
  etcdserverpb::PutRequest* request = txn.add_success()->mutable_request_put();
  request->set_key(put.key);
  request->set_value(put.value);
}

}  // namespace

EtcdStateStore::EtcdStateStore(std::shared_ptr<EtcdClient> client, std::string prefix, TxnLimits limits)
    : client_(std::move(client)), prefix_(std::move(prefix)), limits_(limits) {
  // Batch ids only need to differ from the previous staged Save's, also
  // across coordinators: random, then counted.
  std::random_device random;
  next_batch_ = (static_cast<uint64_t>(random()) << 32) | random();
}

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
  if (txns_left_for_test_ == 0) return absl::UnavailableError("etcd store: stopped for a test");
  if (txns_left_for_test_ > 0) --txns_left_for_test_;
  absl::StatusOr<etcdserverpb::TxnResponse> response = client_->Txn(request);
  if (!response.ok() || response->succeeded() || !fence_.has_value()) return response;
  const etcdserverpb::RangeResponse& leader = response->responses(0).response_range();
  const int64_t now_created = leader.kvs_size() == 0 ? 0 : leader.kvs(0).create_revision();
  if (now_created != fence_->create_revision) {
    if (on_refused_) on_refused_();
    return absl::FailedPreconditionError(
        absl::StrCat("not the leader any more: write refused (leader key ", fence_->key, " created at revision ",
                     fence_->create_revision, " by this coordinator is ",
                     now_created == 0 ? std::string("gone") : absl::StrCat("now from revision ", now_created), ")"));
  }
  return response;
}

absl::Status EtcdStateStore::PutBatches(const std::vector<std::vector<KeyValue>>& batches) {
  for (const std::vector<KeyValue>& batch : batches) {
    etcdserverpb::TxnRequest txn;
    for (const KeyValue& put : batch) AddPut(txn, put);
    auto response = FencedTxn(std::move(txn));
    if (!response.ok()) return response.status();
  }
  return absl::OkStatus();
}

std::string EtcdStateStore::BatchPrefix(uint64_t batch) const {
  return absl::StrCat(SplitPrefix(), absl::Hex(batch, absl::kZeroPad16), "/");
}

absl::Status EtcdStateStore::DeleteRange(const std::string& prefix) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::DeleteRangeRequest* range = txn.add_success()->mutable_request_delete_range();
  range->set_key(prefix);
  range->set_range_end(PrefixRangeEnd(prefix));
  return FencedTxn(std::move(txn)).status();
}

absl::Status EtcdStateStore::PutAtomically(std::vector<KeyValue> puts, const std::function<void()>& committed) {
  auto batches = SplitIntoTxns(puts, limits_);
  if (!batches.ok()) return batches.status();
  if (batches->size() <= 1) {
    absl::Status status = PutBatches(*batches);
    if (status.ok() && committed) committed();
    return status;
  }

  // Stage: the records packed into chunks, the commit with the last one.
  const uint64_t batch = next_batch_++;
  std::vector<etcd::StagedChunk> chunks(1);
  size_t chunk_bytes = 0;
  for (const KeyValue& put : puts) {
    const size_t size = put.key.size() + put.value.size() + kStagedWriteOverhead;
    if (chunk_bytes + size > limits_.max_bytes - kStagedCommitRoom && chunk_bytes > 0) {
      chunks.emplace_back();
      chunk_bytes = 0;
    }
    chunk_bytes += size;
    etcd::StagedWrite* write = chunks.back().add_writes();
    write->set_key(put.key);
    write->set_value(put.value);
  }
  etcd::StagedCommit commit;
  commit.set_batch(batch);
  commit.set_chunks(static_cast<int32_t>(chunks.size()));
  const std::string staged = BatchPrefix(batch);
  for (size_t i = 0; i < chunks.size(); ++i) {
    chunks[i].set_batch(batch);
    etcdserverpb::TxnRequest txn;
    AddPut(txn, {staged + std::to_string(i), chunks[i].SerializeAsString()});
    if (i + 1 == chunks.size()) AddPut(txn, {staged + "commit", commit.SerializeAsString()});
    auto response = FencedTxn(std::move(txn));
    if (!response.ok()) return response.status();
  }
  // Committed: now the records themselves, then the batch goes. A failure
  // from here on leaves the batch for Load (the records are not lost).
  if (committed) committed();
  if (auto status = PutBatches(*batches); !status.ok()) return status;
  if (auto status = DeleteRange(staged); !status.ok()) {
    LOG(WARNING) << "etcd store: staged batch " << staged << " not deleted (the next leader's Load will): " << status;
  }
  return absl::OkStatus();
}

absl::Status EtcdStateStore::CompleteStagedSaves(std::map<std::string, mvccpb::KeyValue>& kvs) {
  // The staged keys, by batch.
  std::map<std::string, std::map<std::string, mvccpb::KeyValue>> batches;
  const std::string split = SplitPrefix();
  for (auto it = kvs.lower_bound(split); it != kvs.end() && absl::StartsWith(it->first, split);) {
    absl::string_view rest = absl::string_view(it->first).substr(split.size());
    const size_t slash = rest.find('/');
    const std::string batch(rest.substr(0, slash));
    const std::string part(slash == absl::string_view::npos ? "" : rest.substr(slash + 1));
    batches[batch][part] = std::move(it->second);
    it = kvs.erase(it);
  }
  if (batches.empty()) return absl::OkStatus();
  // Committed batches, oldest commit first; one not committed was never
  // acknowledged and is only deleted.
  std::vector<std::pair<int64_t, std::vector<etcd::StagedChunk>>> committed;
  for (auto& [batch, parts] : batches) {
    auto commit_kv = parts.find("commit");
    if (commit_kv == parts.end()) continue;
    etcd::StagedCommit commit;
    if (!commit.ParseFromString(commit_kv->second.value())) {
      return absl::DataLossError(absl::StrCat(split, batch, "/commit does not parse"));
    }
    std::vector<etcd::StagedChunk> chunks(commit.chunks());
    for (int i = 0; i < commit.chunks(); ++i) {
      auto chunk_kv = parts.find(std::to_string(i));
      if (chunk_kv == parts.end() || !chunks[i].ParseFromString(chunk_kv->second.value()) ||
          chunks[i].batch() != commit.batch()) {
        return absl::DataLossError(absl::StrCat(split, batch, "/", i, " is missing or not of its batch"));
      }
    }
    committed.emplace_back(commit_kv->second.mod_revision(), std::move(chunks));
  }
  std::sort(committed.begin(), committed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<std::string, std::string> unwritten;
  for (const auto& [committed_at, chunks] : committed) {
    for (const etcd::StagedChunk& chunk : chunks) {
      for (const etcd::StagedWrite& write : chunk.writes()) {
        mvccpb::KeyValue& kv = kvs[write.key()];
        if (kv.mod_revision() >= committed_at) continue;  // written since the commit
        kv.set_key(write.key());
        kv.set_value(write.value());
        kv.set_mod_revision(committed_at);
        unwritten[write.key()] = write.value();
      }
    }
  }
  if (!fence_.has_value()) return absl::OkStatus();  // not the leader: read only
  std::vector<KeyValue> puts;
  for (auto& [key, value] : unwritten) puts.push_back({key, std::move(value)});
  auto writes = SplitIntoTxns(std::move(puts), limits_);
  if (!writes.ok()) return writes.status();
  if (auto status = PutBatches(*writes); !status.ok()) return status;
  return DeleteRange(split);
}

absl::StatusOr<ClusterState> EtcdStateStore::Load(double now) {
  std::map<std::string, mvccpb::KeyValue> kvs;
  etcdserverpb::RangeRequest page;
  page.set_key(prefix_);
  page.set_range_end(PrefixRangeEnd(prefix_));
  page.set_limit(kLoadPageKeys);
  while (true) {
    auto response = client_->Range(page);
    if (!response.ok()) return response.status();
    // Every page at the first page's revision: one consistent snapshot.
    if (page.revision() == 0) page.set_revision(response->header().revision());
    for (const mvccpb::KeyValue& kv : response->kvs()) kvs[kv.key()] = kv;
    if (!response->more() || response->kvs_size() == 0) break;
    page.set_key(response->kvs(response->kvs_size() - 1).key() + std::string(1, '\0'));
  }
  if (auto status = CompleteStagedSaves(kvs); !status.ok()) return status;

  ClusterState state;
  // Checkpoint rows with the revision that created them: commit order.
  std::vector<std::pair<int64_t, v1::CheckpointInfo>> checkpoints;
  for (const auto& [key, kv] : kvs) {
    absl::string_view name = key;
    name.remove_prefix(prefix_.size());
    if (absl::ConsumePrefix(&name, "jobs/")) {
      JobRecord job;
      if (auto status = DecodeRow(JobsTable(), kv.value(), key, &job); !status.ok()) return status;
      state.next_submit_seq = std::max(state.next_submit_seq, job.submit_seq + 1);
      const std::string id = job.info.id();
      state.jobs[id] = std::move(job);
    } else if (absl::ConsumePrefix(&name, "workers/")) {
      WorkerRecord worker;
      if (auto status = DecodeRow(WorkersTable(), kv.value(), key, &worker); !status.ok()) return status;
      worker.last_heartbeat = now;
      const std::string id = worker.id;
      state.workers[id] = std::move(worker);
    } else if (absl::ConsumePrefix(&name, "checkpoints/")) {
      StoredCheckpoint checkpoint;
      if (auto status = DecodeRow(CheckpointsTable(), kv.value(), key, &checkpoint); !status.ok()) return status;
      checkpoints.emplace_back(kv.create_revision(), std::move(checkpoint.info));
    }
    // Other keys under the prefix (the leader key) are not records.
  }
  std::stable_sort(checkpoints.begin(), checkpoints.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [revision, info] : checkpoints) state.checkpoints[info.job_id()].push_back(std::move(info));
  AssignMembersOfRunningJobs(state);
  return state;
}

absl::Status EtcdStateStore::Write(const StateWrite& records, const std::function<void()>& committed) {
  if (records.empty()) {
    if (committed) committed();
    return absl::OkStatus();
  }
  std::vector<KeyValue> puts;
  puts.reserve(records.size());
  for (const WorkerRecord& worker : records.workers) {
    puts.push_back({WorkerKey(worker.id), EncodeRow(WorkersTable(), worker)});
  }
  for (const JobRecord& job : records.jobs) puts.push_back({JobKey(job.info.id()), EncodeRow(JobsTable(), job)});
  return PutAtomically(std::move(puts), committed);
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
