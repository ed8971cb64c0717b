// What one rank process of the all-reduce benchmark does: connect herd's
// Communicator, the direct Gloo context and the TCP pump, then time every
// (size, variant) case and write the samples to a file for the parent.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace herd::bench {

// Variant names, also the JSON keys.
inline constexpr char kPump[] = "tcp_pump";
inline constexpr char kHerd[] = "herd";
// herd's Communicator as trainers on one host build it: float32 sums in
// shared memory (sync.same_host_transport: shm) in front of Gloo, on a buffer
// the communicator handed out (as gradient buckets are), so summed in place.
inline constexpr char kHerdShm[] = "herd_shm";
// The TCP mesh, herd's own member-authenticated transport
// (tcp_mesh_communicator.h), what trainers use with --data-plane=tcp.
inline constexpr char kHerdTcp[] = "herd_tcp";
// The same two communicators summing float16 (the buffer's bytes read as
// halves: twice the elements, the same bytes on the wire).
inline constexpr char kHerdF16[] = "herd_f16";
inline constexpr char kHerdTcpF16[] = "herd_tcp_f16";
inline constexpr char kGloo[] = "gloo_ring";
inline constexpr char kGlooChunked[] = "gloo_ring_chunked";
inline constexpr char kGlooSegmentPrefix[] = "gloo_ring@";   // + max segment bytes
inline constexpr char kGlooStripedPrefix[] = "gloo_ring_x";  // + stripes (connections per peer)

struct AllreduceCaseOptions {
  std::vector<size_t> sizes;  // bytes, multiples of 4 (float32)
  std::vector<std::string> variants = {kPump, kHerd, kGloo, kGlooChunked, kHerdShm};
  int iterations = 10;            // timed samples per case, at most
  int min_iterations = 3;         // ... and at least, whatever the time budget
  int warmup = 2;                 // untimed batches per case
  double max_case_seconds = 3;    // time budget per case, which caps iterations
  size_t batch_bytes = 4 << 20;   // small sizes are timed in batches of this many bytes...
  int max_batch = 64;             // ... or this many ops, whichever is fewer
  size_t gloo_segment_bytes = 0;  // direct ring's max segment; 0: Gloo's default
  std::chrono::milliseconds timeout{60000};
};

// Runs rank `rank` of `world`, rendezvousing through files in `store_dir`,
// and writes {"rank":R,"cases":[{"variant","bytes","reps","correct","seconds":[...],
// "cpu_seconds":[...]}]} to `result_path`. `seconds` holds one sample per
// iteration: this rank's time per op (the pump: rank 0's only);
// `cpu_seconds` this process's CPU time per op in the same iteration. The
// file is rewritten after each size, so it holds what was measured even when
// a later size fails.
absl::Status RunAllreduceRank(const AllreduceCaseOptions& options, int world, int rank, const std::string& store_dir,
                              const std::string& result_path);

// Ops per timed sample for `bytes`-sized messages.
int BatchFor(const AllreduceCaseOptions& options, size_t bytes);

}  // namespace herd::bench
