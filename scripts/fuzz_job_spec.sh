#!/usr/bin/env bash
# Fuzzes the job-spec YAML parser and validation with libFuzzer (clang,
# AddressSanitizer, UndefinedBehaviorSanitizer), starting from the example
# job files. CI runs the seeded mutation loop instead
# (//common:job_spec_fuzz_test); this is for longer runs by hand.
#   scripts/fuzz_job_spec.sh [RUNS]   (default 200000; 0 runs until stopped)
# A finding is written as crash-*/ in the current folder; replay it with
#   scripts/fuzz_job_spec.sh FILE
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang++ >/dev/null || { echo "clang++ is missing (apt-get install clang)" >&2; exit 2; }
scripts/bazel.sh build //proto:herd_cc_proto >/dev/null
GEN="$(bazel info bazel-bin 2>/dev/null)/proto"
OUT="${TMPDIR:-/tmp}/herd-fuzz-job-spec"
mkdir -p "$OUT/corpus"
cp examples/*.yaml "$OUT/corpus/"
clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -I. -I"$GEN/.." -I"$(dirname "$GEN")" \
  common/job_spec_fuzz.cc common/job_spec.cc common/job_spec_yaml.cc common/control_chars.cc "$GEN/herd.pb.cc" \
  -o "$OUT/fuzz_job_spec" -lyaml-cpp -lprotobuf $(ls /usr/lib/x86_64-linux-gnu/libabsl_*.so) -lpthread
if [ -f "${1:-}" ]; then
  exec "$OUT/fuzz_job_spec" "$1"
fi
exec "$OUT/fuzz_job_spec" -runs="${1:-200000}" -max_len=4096 "$OUT/corpus"
