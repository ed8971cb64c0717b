// The coordinator's ClusterState in etcd (v3 API), so that another
// coordinator can take over from it (--store=etcd://...).
//
// Layout under the key prefix P: one value per record, each a StoredRow of
// the same columns SQLite keeps (coordinator/state_tables.h):
//   P jobs/<job id>, P workers/<worker id>, P checkpoints/<checkpoint id>.
// A checkpoint's place in commit order is the etcd revision that created
// its key (the stored commit_seq column is not used).
//
// Writes and etcd's limits: a Save is one transaction when it fits (128
// operations, 1 MiB of keys and values). A rendezvous is one record, the
// job's, however many workers it takes (a worker's record does not say
// which job it is busy with). A larger Save (many records retried after
// an outage) is still atomic: it is staged first, its records packed into
// chunks of at most 1 MiB under P split/<batch>/<i>, and committed by one
// small value P split/<batch>/commit written in the same transaction as
// the last chunk. Only then are the records written, 128 a transaction,
// and the staged batch deleted. A coordinator lost (or an etcd failure)
// before the commit leaves nothing of the Save visible; after it, records
// older than the commit are taken from the batch by Load, which as the fenced
// leader also writes them and deletes every staged batch.
//
// Fencing: with FenceWith, every transaction first compares the leader
// key's create revision with this coordinator's token; once another
// coordinator leads, every write is refused (FAILED_PRECONDITION) and
// nothing of it is applied.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd/write_batches.h"
#include "coordinator/state_store.h"

namespace herd::coordinator {

struct EtcdFence {
  std::string key;
  int64_t create_revision = 0;  // the token
};

class EtcdStateStore : public StateStore {
 public:
  // `prefix`: every key this store writes starts with it (e.g. "/herd/").
  EtcdStateStore(std::shared_ptr<EtcdClient> client, std::string prefix, TxnLimits limits = {});

  // From now on every write is fenced by `fence`; `on_refused` (if set) is
  // called on each write the fence refuses: the caller is not the leader
  // any more and should step down.
  void FenceWith(EtcdFence fence, std::function<void()> on_refused = nullptr) {
    fence_ = std::move(fence);
    on_refused_ = std::move(on_refused);
  }

  absl::StatusOr<ClusterState> Load(double now) override;
  using StateStore::Write;
  // `committed`: after the one transaction that commits the records (the
  // last chunk's, for a staged write), before the records are put.
  absl::Status Write(const StateWrite& records, const std::function<void()>& committed) override;
  absl::Status SaveCheckpoint(const v1::CheckpointInfo& added, const std::vector<v1::CheckpointInfo>& dropped) override;

  // Tests of a coordinator lost mid-write: every write after the next
  // `count` transactions fails (UNAVAILABLE) without reaching etcd.
  void StopAfterTxnsForTest(int count) { txns_left_for_test_ = count; }

  std::string JobKey(const std::string& id) const { return prefix_ + "jobs/" + id; }
  std::string WorkerKey(const std::string& id) const { return prefix_ + "workers/" + id; }
  std::string CheckpointKey(const std::string& id) const { return prefix_ + "checkpoints/" + id; }

 private:
  // `request` with the fence's compare first. FAILED_PRECONDITION when the
  // fence refused it; a response with succeeded=false when the caller's own
  // compares did.
  absl::StatusOr<etcdserverpb::TxnResponse> FencedTxn(etcdserverpb::TxnRequest request);
  // Writes `puts` all or nothing (see the header comment); `committed` as
  // Write's.
  absl::Status PutAtomically(std::vector<KeyValue> puts, const std::function<void()>& committed);
  absl::Status PutBatches(const std::vector<std::vector<KeyValue>>& batches);
  // The records committed staged Saves left unwritten, into `kvs` (by key);
  // takes the staged keys out of `kvs`.
  absl::Status CompleteStagedSaves(std::map<std::string, mvccpb::KeyValue>& kvs);
  absl::Status DeleteRange(const std::string& prefix);

  std::string SplitPrefix() const { return prefix_ + "split/"; }
  std::string BatchPrefix(uint64_t batch) const;

  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
  TxnLimits limits_;
  std::optional<EtcdFence> fence_;
  std::function<void()> on_refused_;
  uint64_t next_batch_;
  int txns_left_for_test_ = -1;  // < 0: no limit
};

}  // namespace herd::coordinator
