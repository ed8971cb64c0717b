// Tests only: `workers` idle CPU workers (ids worker-FIRST, worker-FIRST+1,
// ...) registered at t=500 and a pending job "job-big" at t=600 that needs
// all of them, so Schedule(state, 601) starts it on every one: a change
// larger than one store transaction holds.
#pragma once

#include <string>

#include "coordinator/cluster_state.h"

namespace herd::coordinator::testing {

inline ChangeSet RegisterWorkersAndBigJob(ClusterState& state, int workers, int first_id) {
  ChangeSet changes;
  for (int i = 0; i < workers; ++i) {
    v1::RegisterWorkerRequest request;
    request.set_worker_id("worker-" + std::to_string(first_id + i));
    request.set_address(request.worker_id() + ":29500");
    request.set_device_kind("cpu");
    request.set_device_count(1);
    changes.Merge(UpsertWorker(state, request, 500));
  }
  v1::JobSpec spec;
  spec.set_name("big");
  spec.mutable_model()->set_name("mlp");
  spec.set_batch_size(8 * workers);
  spec.set_min_workers(workers);
  spec.set_max_workers(workers);
  spec.set_device(v1::DEVICE_CPU);
  AddPendingJob(state, "job-big", spec, 600, &changes);
  return changes;
}

}  // namespace herd::coordinator::testing
