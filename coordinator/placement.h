// Which workers a job may run on, by their labels (herd-worker --label), and
// how its ranks are ordered by island. Pure functions of the job's spec and
// the workers' labels (docs/scheduling.md).
//
// A worker fits a job when it carries every label of spec.placement.require
// with exactly that value and, when spec.sync.islands_by is set, carries
// that label key (any value: the value names its island).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/herd.pb.h"

namespace herd::coordinator {

using WorkerLabels = std::map<std::string, std::string>;

// Whether the job's spec restricts its workers by label at all.
bool HasPlacement(const v1::JobSpec& spec);

// Whether a worker with these labels may run the job.
bool FitsPlacement(const WorkerLabels& labels, const v1::JobSpec& spec);

// What the job asks of its workers' labels, for a job's reason:
// "placement.require pool=a100, sync.islands_by site" ("" with none).
std::string PlacementText(const v1::JobSpec& spec);

// With spec.sync.islands_by set: `members` reordered so each island's
// workers are contiguous, islands in ascending (byte) order of the label
// value; a stable order, so within an island the previous order (survivors
// ahead of joiners) stands. Unchanged without islands_by. `labels_of`
// gives each member's labels (a member without them sorts first, as value "").
std::vector<std::string> OrderedByIsland(const std::vector<std::string>& members,
                                         const std::map<std::string, WorkerLabels>& labels_of,
                                         const v1::JobSpec& spec);

}  // namespace herd::coordinator
