// sync.overlap_steps: auto. Chooses tau, the local steps a round's
// communication runs behind before its result is merged, from what the
// rounds measured: the time a round needs the link for (its in-flight
// time, round_timeline.h), the time a local step takes, and how long the
// caller still blocked.
//
// tau must make tau steps last longer than a round needs, with a margin:
//   needed = ceil(round_seconds * (1 + margin) / step_seconds)
// It grows at once to needed when needed is above it, by one when needed
// equals it and the round was still exposed (the caller blocked for more
// than a small share of a step), and shrinks by a quarter of the gap (at
// least one step) per decision when needed is below it: a smaller tau
// merges fresher averages. A wait while
// the round's time is well inside tau is a peer running late (local steps
// drift apart), which a larger tau does not cure: it does not grow tau.
// Always within [min_steps, max_steps] (max: sync.every); when needed is
// above max_steps, the decision says so, for the job's warning.
//
// Every rank decides on the same inputs (the ranks' measurements summed by
// a collective), so every rank computes the same tau at the same step.
#pragma once

#include <cstdint>
#include <string>

namespace herd {

struct OverlapMeasurement {
  double round_seconds = 0;    // a round's in-flight time (launch to the network's end)
  double step_seconds = 0;     // a local training step's wall time
  double blocked_seconds = 0;  // the caller's wait for the round
};

struct OverlapBounds {
  int64_t min_steps = 1;
  int64_t max_steps = 1;
  double margin = 0.25;
  // A round counts as exposed when the caller blocked longer than this
  // share of a step (a wait that short is scheduling noise, not the link).
  double exposed_share = 0.05;
};

struct OverlapDecision {
  int64_t steps = 1;          // the new tau
  int64_t needed_steps = 1;   // what the measurement asks for (may exceed max_steps)
  bool exposed = false;       // the measured round blocked the caller
  bool beyond_bound = false;  // needed_steps > max_steps: even tau = every cannot hide a round
};

OverlapDecision ChooseOverlap(int64_t current, const OverlapMeasurement& m, const OverlapBounds& bounds);

// The job's warning when a decision is beyond its bound, else "".
// "the link needs 40 steps per round; sync.every is 32 (a round takes 3.2 s,
// a step 0.08 s): raise sync.every or use compression"
std::string OverlapWarning(const OverlapDecision& d, const OverlapMeasurement& m, const OverlapBounds& bounds);

}  // namespace herd
