// A job whose newest state the coordinator could not write to its state
// database (disk full, read-only, I/O error): how long that has lasted, when
// to try again and what its users are told. Pure functions of (trouble, now).
#pragma once

#include <cstdint>
#include <string>

namespace herd::coordinator {

struct WriteTrouble {
  double since = 0;         // the first failed write of this spell
  double last_attempt = 0;  // the newest failed write
  int64_t failures = 0;     // failed writes in this spell
  std::string error;        // the newest failure, as the database said it
};

// Records one more failed write at `now`; returns true when this is the
// first of a spell (the moment to log and to warn the job's users).
bool NoteWriteFailure(WriteTrouble& trouble, const std::string& error, double now);

// Failed writes back off: 0.5 s after the first, doubling up to 8 s, so a
// full disk costs a few writes a minute, not five a second.
double NextWriteAttempt(const WriteTrouble& trouble);

// The job's storage warning: since when the coordinator cannot save it, why,
// and what that risks.
std::string StorageWarning(const WriteTrouble& trouble);

}  // namespace herd::coordinator
