// What the coordinator's database holds, column by column: the jobs,
// workers and checkpoints tables described once (sql_table.h), from which
// StateStore creates, migrates, reads and writes them.
#pragma once

#include <cstdint>

#include "coordinator/cluster_state.h"
#include "coordinator/sql_table.h"
#include "proto/herd.pb.h"

namespace herd::coordinator {

// A checkpoint row: the catalog entry and its place in commit order.
struct StoredCheckpoint {
  v1::CheckpointInfo info;
  int64_t commit_seq = 0;
};

// A job's whole record except what is not persisted (JobRecord says which).
// Reading one also sets the mirrors of the stored fields (info.name,
// info.generation, info.workers).
const sql::Table<JobRecord>& JobsTable();
// Workers as registered, and whether dead. last_heartbeat is not stored,
// nor the job a worker is busy with: that is the job's record
// (AssignMembersOfRunningJobs sets it when the state is loaded).
const sql::Table<WorkerRecord>& WorkersTable();
const sql::Table<StoredCheckpoint>& CheckpointsTable();

}  // namespace herd::coordinator
