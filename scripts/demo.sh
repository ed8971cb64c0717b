#!/usr/bin/env bash
# The demo: installs what is missing, builds herd, starts a local coordinator
# and 2 workers, trains mnist_cnn on Fashion-MNIST with a live progress bar,
# and prints the final test accuracy. Usage: scripts/demo.sh [JOB.yaml]
set -euo pipefail
cd "$(dirname "$0")/.."
JOB_FILE="${1:-examples/fashion-mnist-cnn.yaml}"

scripts/setup.sh
echo "==> building herd (the first build takes several minutes)"
scripts/bazel.sh build //coordinator:herd-coordinator //worker/daemon:herd-worker \
  //worker/train:herd-trainer //client:herd 2>&1 | grep -E "^(ERROR|FAILED|INFO: Build completed)" || true
BIN="$(bazel info bazel-bin 2>/dev/null)"
for b in coordinator/herd-coordinator worker/daemon/herd-worker worker/train/herd-trainer client/herd; do
  [ -x "$BIN/$b" ] || { echo "build failed: $BIN/$b missing" >&2; exit 1; }
done

RUN="$(mktemp -d /tmp/herd-demo.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "logs and state kept in $RUN"
}
trap cleanup EXIT

# Auth stays on even for a demo: one random token per principal (you as a
# user, the workers, an admin), each in a private file, and the
# coordinator's auth file holding only their SHA-256s.
umask 077
new_token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$1"; }
sha256_of() { sha256sum < "$1" | cut -d' ' -f1; }
for who in user worker admin; do new_token "$RUN/$who-token"; done
cat > "$RUN/auth" <<EOF
# PRINCIPAL  ROLE    CREDENTIAL                              WORKER-IDS
demo-user    user    sha256:$(sha256_of "$RUN/user-token")
demo-workers worker  sha256:$(sha256_of "$RUN/worker-token")  worker-0,worker-1
demo-admin   admin   sha256:$(sha256_of "$RUN/admin-token")
EOF

wait_for() {  # wait_for FILE: a process's ready file
  for _ in $(seq 1 300); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2; return 1
}
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

"$BIN/coordinator/herd-coordinator" --listen=127.0.0.1:0 --metrics-listen=127.0.0.1:0 \
  --state-dir="$RUN/state" --auth-file="$RUN/auth" --ready-file="$RUN/coordinator.json" \
  > "$RUN/coordinator.log" 2>&1 &
pids+=($!)
wait_for "$RUN/coordinator.json"
export HERD_COORDINATOR="$(json_field "$RUN/coordinator.json" listen)"
export HERD_TOKEN_FILE="$RUN/user-token"
echo "==> coordinator at $HERD_COORDINATOR (metrics at $(json_field "$RUN/coordinator.json" metrics))"

# Both workers share one checkpoint root, as shared storage would be.
export HERD_CHECKPOINT_ROOT="$RUN/checkpoints"
for i in 0 1; do
  "$BIN/worker/daemon/herd-worker" --coordinator="$HERD_COORDINATOR" --token-file="$RUN/worker-token" \
    --worker-id="worker-$i" --work-dir="$RUN/worker-$i" --metrics-listen=127.0.0.1:0 \
    --trainer-binary="$BIN/worker/train/herd-trainer" --ready-file="$RUN/worker-$i.json" \
    > "$RUN/worker-$i.log" 2>&1 &
  pids+=($!)
done
wait_for "$RUN/worker-0.json"
wait_for "$RUN/worker-1.json"
"$BIN/client/herd" workers

echo "==> submitting $JOB_FILE"
status=0
"$BIN/client/herd" submit "$JOB_FILE" --watch || status=$?
job="$("$BIN/client/herd" list -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["id"])')"
"$BIN/client/herd" status "$job"
accuracy="$("$BIN/client/herd" status "$job" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("eval",{}).get("accuracy","n/a"))')"
echo "==> final test accuracy: $accuracy"
exit $status
