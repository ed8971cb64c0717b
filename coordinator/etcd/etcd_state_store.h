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
// operations, 1 MiB of keys and values); a larger one (a 1000-worker
// rendezvous) is split into several, worker records first and job records
// last. A job record is the authority (a re-registering worker's BUSY/IDLE
// is derived from the jobs, UpsertWorker), so a coordinator lost between
// the transactions leaves at worst worker records ahead of their job, never
// a job whose generation names records that were not written. Each
// transaction is atomic on its own.
//
// Fencing: with FenceWith, every transaction first compares the leader
// key's create revision with this coordinator's token; once another
// coordinator leads, every write is refused (FAILED_PRECONDITION) and
// nothing of it is applied.
#pragma once

#include <functional>
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
  absl::Status Save(const ClusterState& state, const ChangeSet& changes) override;
  absl::Status SaveCheckpoint(const v1::CheckpointInfo& added,
                              const std::vector<v1::CheckpointInfo>& dropped) override;

  std::string JobKey(const std::string& id) const { return prefix_ + "jobs/" + id; }
  std::string WorkerKey(const std::string& id) const { return prefix_ + "workers/" + id; }
  std::string CheckpointKey(const std::string& id) const { return prefix_ + "checkpoints/" + id; }

 private:
  // `request` with the fence's compare first. FAILED_PRECONDITION when the
  // fence refused it; a response with succeeded=false when the caller's own
  // compares did.
  absl::StatusOr<etcdserverpb::TxnResponse> FencedTxn(etcdserverpb::TxnRequest request);
  absl::Status PutAll(std::vector<KeyValue> puts);

  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
  TxnLimits limits_;
  std::optional<EtcdFence> fence_;
  std::function<void()> on_refused_;
};

}  // namespace herd::coordinator
