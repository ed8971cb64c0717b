#!/usr/bin/env bash
# Checks the images deploy/docker/build.sh made, on demand: it needs root,
# buildah and the images in the local store, and takes about a minute, so it
# is not part of CI. Two parts:
#   1. each image: mounted (buildah mount), its binaries' --help and
#      --version run inside it with chroot as the chart's user; its user and
#      entrypoint are the chart's; it holds no compiler, Bazel or -dev package;
#   2. a cluster from the images' root filesystems: the coordinator and two
#      workers on three testbed hosts (network namespaces), each from its own
#      container of its image, started with the command line, environment,
#      volumes and user the chart renders (pod_command.js plays the kubelet);
#      the CLI image submits a short Fashion-MNIST job, which must succeed on
#      both workers with checkpoints on the shared volume.
#   deploy/test/image_check.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TEST_DIR="$REPO/deploy/test"
CHART="$REPO/deploy/helm/herd"
DEADLINE_SECONDS=300 # for each wait; the job itself takes well under a minute
MAX_STEPS=40

die() {
  echo "image_check: $*" >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || die "needs root (buildah mount, chroot, network namespaces)"
command -v buildah >/dev/null || die "buildah is missing (apt-get install -y buildah podman debootstrap)"

WORK="$(mktemp -d /var/tmp/herd-image-check.XXXXXX)"
CONTAINERS=()
PIDS=()
BED=""
TB=""

cleanup() {
  local rc=$? pid c
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$BED" ]; then "$TB" down "$BED" >/dev/null || echo "image_check: testbed $BED: down failed" >&2; fi
  for c in "${CONTAINERS[@]}"; do
    buildah umount "$c" >/dev/null 2>&1 || true
    buildah rm "$c" >/dev/null 2>&1 || echo "image_check: cannot remove container $c" >&2
  done
  if [ "$rc" -ne 0 ]; then
    for log in "$WORK"/pods/*/log; do
      [ -f "$log" ] && { echo "--- $log (last 30 lines)"; tail -n 30 "$log"; } >&2
    done
    echo "image_check: FAILED; files kept in $WORK" >&2
  else
    rm -rf "$WORK"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

json_get() { # json_get FILE_OR_- EXPRESSION (JavaScript on `j`)
  node -e 'const fs = require("fs"); const j = JSON.parse(fs.readFileSync(process.argv[1] === "-" ? 0 : process.argv[1], "utf8"));
    const v = eval(process.argv[2]); if (v === undefined) process.exit(3); console.log(typeof v === "object" ? JSON.stringify(v) : v);' "$1" "$2"
}

# wait_for_file FILE PID WHAT: until FILE is non-empty; PID must stay alive.
wait_for_file() {
  local file="$1" pid="$2" what="$3" deadline=$((SECONDS + DEADLINE_SECONDS))
  until [ -s "$file" ]; do
    kill -0 "$pid" 2>/dev/null || die "$what exited before it was ready"
    [ "$SECONDS" -lt "$deadline" ] || die "$what not ready after $DEADLINE_SECONDS s"
    sleep 0.5
  done
}

# new_root IMAGE: a fresh container of IMAGE, mounted at $ROOT. (Not in a
# command substitution: the cleanup needs CONTAINERS.)
new_root() {
  local c
  c="$(buildah from --pull-never --quiet "$1")" || die "no image $1 in the local store; run deploy/docker/build.sh"
  CONTAINERS+=("$c")
  ROOT="$(buildah mount "$c")" || die "buildah mount $c failed"
}

# ---- tools and the rendering ------------------------------------------------
(cd "$REPO" && scripts/bazel.sh build //deploy/test:helm_render //tests/testbed:herd-testbed) >"$WORK/bazel.log" 2>&1 ||
  { tail -n 20 "$WORK/bazel.log" >&2; die "building helm-render and herd-testbed failed"; }
TB="$REPO/bazel-bin/tests/testbed/herd-testbed"
TAG="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$CHART/Chart.yaml")"
# One credential per role, as the chart requires (docs/security.md).
USER_TOKEN="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
WORKER_TOKEN="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
"$REPO/bazel-bin/deploy/test/helm-render" --chart "$CHART" --format json -f "$TEST_DIR/image_check_values.yaml" \
  --set "auth.userToken=$USER_TOKEN" --set "auth.workerToken=$WORKER_TOKEN" >"$WORK/rendered.json" ||
  die "rendering the chart failed"

# pod_runtime COMPONENT: sets IMAGE PROGRAM RUN_UID RUN_GID FS_GROUP.
pod_runtime() {
  IFS=$'\t' read -r IMAGE PROGRAM RUN_UID RUN_GID FS_GROUP < <(node "$TEST_DIR/pod_runtime.js" "$WORK/rendered.json" "$1" "$1")
  [ -n "$FS_GROUP" ] || die "cannot read the $1 pod from the rendering"
}

# ---- 1. each image ----------------------------------------------------------
# check_image IMAGE USER ENTRYPOINT_JSON PROGRAM...
check_image() {
  local image="$1" user="$2" entrypoint="$3" root program name out
  shift 3
  buildah inspect --type image "$image" >"$WORK/inspect.json" 2>/dev/null ||
    die "no image $image in the local store; run deploy/docker/build.sh"
  [ "$(json_get "$WORK/inspect.json" j.OCIv1.config.User)" = "$user" ] ||
    die "$image runs as '$(json_get "$WORK/inspect.json" j.OCIv1.config.User)', the chart as $user"
  [ "$(json_get "$WORK/inspect.json" j.OCIv1.config.Entrypoint)" = "$entrypoint" ] ||
    die "$image: ENTRYPOINT is $(json_get "$WORK/inspect.json" j.OCIv1.config.Entrypoint), the pod's command $entrypoint"
  new_root "$image"
  root="$ROOT"
  for program in "$@"; do
    name="$(basename "$program")"
    out="$(chroot --userspec="$user" "$root" "$program" --help)" || die "$image: $name --help failed"
    grep -q -- '--version' <<<"$out" || die "$image: $name --help does not list --version"
    out="$(chroot --userspec="$user" "$root" "$program" --version)" || die "$image: $name --version failed"
    [ "$out" = "$name $TAG" ] || die "$image: $name --version printed '$out', expected '$name $TAG'"
    ! chroot "$root" ldd "$program" | grep 'not found' || die "$image: $name misses libraries"
  done
  for tool in gcc g++ cc c++ ld make bazel; do
    [ ! -e "$root/usr/bin/$tool" ] || die "$image holds /usr/bin/$tool"
  done
  ! chroot "$root" dpkg-query -W -f '${Package}\n' | grep -E -- '-dev$' || die "$image holds development packages"
  printf 'image_check: %-32s ok: %s; %s packages, %s\n' "$image" "$*" \
    "$(chroot "$root" dpkg-query -W -f '${Package}\n' | wc -l)" \
    "$(podman image inspect --format '{{.Size}}' "$image" | numfmt --to=iec)"
}

pod_runtime coordinator
COORDINATOR_IMAGE="$IMAGE" COORDINATOR_PROGRAM="$PROGRAM"
check_image "$IMAGE" "$RUN_UID:$RUN_GID" "[\"$PROGRAM\"]" "$PROGRAM"
pod_runtime worker
WORKER_IMAGE="$IMAGE" WORKER_PROGRAM="$PROGRAM"
trainer="$(node "$TEST_DIR/print_args.js" "$WORK/rendered.json" worker worker | sed -n 's/^--trainer-binary=//p')"
[ -n "$trainer" ] || die "the worker pod renders no --trainer-binary"
check_image "$IMAGE" "$RUN_UID:$RUN_GID" "[\"$PROGRAM\"]" "$PROGRAM" "$trainer"
# The chart has no CLI pod; the image is for Jobs and debugging pods, with
# the same user.
CLI_IMAGE="localhost/herd-cli:$TAG"
check_image "$CLI_IMAGE" "$RUN_UID:$RUN_GID" '["/usr/local/bin/herd"]' /usr/local/bin/herd

# ---- 2. a cluster from the images -------------------------------------------
BED_JSON="$WORK/testbed.json"
"$TB" up --hosts 3 >"$BED_JSON" || die "herd-testbed up failed"
BED="$(json_get "$BED_JSON" j.name)"
ROOT_ADDRESS="$(json_get "$BED_JSON" j.root_address)"
HOSTS=()
for i in 0 1 2; do HOSTS+=("$(json_get "$BED_JSON" "j.hosts[$i].address")"); done
echo "image_check: testbed $BED: root host $ROOT_ADDRESS, hosts ${HOSTS[*]}"

# mount_sources POD_DIR: turns pod_command's volume list into host folders,
# owned as fsGroup makes them: emptyDirs per pod, PVCs shared by every pod
# (ReadWriteMany), hostPaths as they are.
mount_sources() {
  local dir="$1" kind source target mode host
  while IFS=$'\t' read -r kind source target mode; do
    case "$kind" in
      emptyDir) host="$dir/volumes/$source" ;;
      pvc) host="$WORK/pvc/$source" ;;
      hostPath) host="$source"; [ -d "$host" ] || die "hostPath $host is missing" ;;
      *) die "unknown volume kind $kind" ;;
    esac
    if [ "$kind" != hostPath ] && [ ! -d "$host" ]; then
      mkdir -p "$host"
      chown "0:$FS_GROUP" "$host"
      chmod 2775 "$host"
    fi
    printf '%s\t%s\t%s\n' "$host" "$target" "$mode"
  done <"$dir/volumes.list" >"$dir/mounts"
}

# host_folder POD_DIR PATH: where a container path on a mounted volume lives.
host_folder() {
  awk -F '\t' -v p="$2" '$2 == p { print $1 }' "$1/mounts"
}

# start_pod NAME COMPONENT IMAGE PROGRAM HOST_INDEX [pod_command options...]:
# starts the pod's container in its host; sets POD_PID and POD_DIR.
start_pod() {
  local name="$1" component="$2" image="$3" program="$4" host="$5" root
  shift 5
  POD_DIR="$WORK/pods/$name"
  mkdir -p "$POD_DIR"
  new_root "$image"
  root="$ROOT"
  node "$TEST_DIR/pod_command.js" "$WORK/rendered.json" "$component" "$component" "$root" \
    --pod-name "$name" --pod-ip "${HOSTS[$host]}" --in-root "$POD_DIR/volumes.list" --env-out "$POD_DIR/env" \
    "$@" >"$POD_DIR/argv" || die "pod_command.js failed for $name"
  mount_sources "$POD_DIR"
  mapfile -d '' argv <"$POD_DIR/argv"
  [ "${argv[0]}" = "$(basename "$program")" ] || die "$name: the pod runs ${argv[0]}, not $program"
  echo "image_check: $name on ${HOSTS[$host]}: $program ${argv[*]:1}"
  "$TB" exec "$BED" "h$host" -- "$TEST_DIR/chroot_pod.sh" "$root" "$RUN_UID:$RUN_GID" "$POD_DIR/env" "$POD_DIR/mounts" \
    -- "$program" "${argv[@]:1}" >"$POD_DIR/log" 2>&1 &
  POD_PID=$!
  PIDS+=("$POD_PID")
}

# runs_as PID WHAT: the process is the pod's program, as the chart's user.
runs_as() {
  local uid
  uid="$(awk '/^Uid:/ { print $2 }' "/proc/$1/status")"
  [ "$uid" = "$RUN_UID" ] || die "$2 runs as uid $uid, the chart sets $RUN_UID"
}

pod_runtime coordinator
start_pod herd-coordinator-0 coordinator "$COORDINATOR_IMAGE" "$COORDINATOR_PROGRAM" 0 \
  --writes --state-dir --add --ready-file=/tmp/herd-coordinator-ready.json
COORDINATOR_PID=$POD_PID
ready="$(host_folder "$POD_DIR" /tmp)/herd-coordinator-ready.json"
wait_for_file "$ready" "$COORDINATOR_PID" herd-coordinator
runs_as "$COORDINATOR_PID" herd-coordinator
port="$(json_get "$ready" j.listen)"
COORDINATOR="${HOSTS[0]}:${port##*:}"
echo "image_check: coordinator ready at $COORDINATOR"

pod_runtime worker
WORKER_PIDS=()
WORKER_READY=()
for i in 0 1; do
  start_pod "herd-worker-$i" worker "$WORKER_IMAGE" "$WORKER_PROGRAM" $((i + 1)) \
    --writes --work-dir --writes --ready-file --set "--coordinator=$COORDINATOR"
  WORKER_PIDS+=("$POD_PID")
  WORKER_READY+=("$(host_folder "$POD_DIR" /tmp)/herd-worker-ready.json")
done
for i in 0 1; do
  wait_for_file "${WORKER_READY[$i]}" "${WORKER_PIDS[$i]}" "herd-worker-$i"
  runs_as "${WORKER_PIDS[$i]}" "herd-worker-$i"
  [ "$(json_get "${WORKER_READY[$i]}" j.worker_id)" = "herd-worker-$i" ] || die "herd-worker-$i registered under another id"
done
echo "image_check: both workers registered"

# The CLI from its image, on the root host, as a client pod would run it:
# the user token Secret at /etc/herd/auth/token (private to its user, as herd
# requires), the ConfigMap's variables.
new_root "$CLI_IMAGE"
CLI_ROOT="$ROOT"
CLI_DIR="$WORK/pods/cli"
mkdir -p "$CLI_DIR" "$CLI_ROOT/etc/herd/auth" "$CLI_ROOT/etc/herd/jobs"
printf '%s' "$USER_TOKEN" >"$CLI_ROOT/etc/herd/auth/token"
chown "$RUN_UID:$RUN_GID" "$CLI_ROOT/etc/herd/auth/token"
chmod 600 "$CLI_ROOT/etc/herd/auth/token"
printf 'HERD_COORDINATOR=%s\0HERD_TOKEN_FILE=/etc/herd/auth/token' "$COORDINATOR" >"$CLI_DIR/env"
: >"$CLI_DIR/mounts"
cat >"$CLI_ROOT/etc/herd/jobs/check.yaml" <<EOF
# The README demo, cut short; checkpoints go to the shared volume.
name: image-check
model: mnist_cnn
dataset: {kind: idx, path: /usr/share/datasets/fashion-mnist}
batch_size: 64
max_steps: $MAX_STEPS
optimizer: {name: sgd, lr: 0.05, momentum: 0.9}
sync: {mode: allreduce}
min_workers: 2
max_workers: 2
seed: 1
threads: 1
log_interval_steps: 10
checkpoint: {interval_steps: 20, on_failure: fail}
EOF
herd() {
  timeout "$DEADLINE_SECONDS" "$TEST_DIR/chroot_pod.sh" "$CLI_ROOT" "$RUN_UID:$RUN_GID" "$CLI_DIR/env" "$CLI_DIR/mounts" \
    -- /usr/local/bin/herd "$@"
}
echo "image_check: herd submit --watch (from $CLI_IMAGE)"
herd submit /etc/herd/jobs/check.yaml --watch | tee "$CLI_DIR/watch.log" || die "the job did not succeed (herd watch exited $?)"
JOB="$(head -n 1 "$CLI_DIR/watch.log")"
herd status "$JOB" -o json >"$CLI_DIR/status.json" || die "herd status $JOB failed"
[ "$(json_get "$CLI_DIR/status.json" j.state)" = SUCCEEDED ] || die "job $JOB: $(cat "$CLI_DIR/status.json")"
[ "$(json_get "$CLI_DIR/status.json" j.step)" = "$MAX_STEPS" ] || die "job $JOB stopped at step $(json_get "$CLI_DIR/status.json" j.step)"
[ "$(json_get "$CLI_DIR/status.json" j.world_size)" = 2 ] || die "job $JOB did not run on both workers"
herd checkpoints "$JOB" -o json >"$CLI_DIR/checkpoints.json" || die "herd checkpoints $JOB failed"
[ "$(json_get "$CLI_DIR/checkpoints.json" 'j.checkpoints.length')" -ge 1 ] || die "job $JOB wrote no checkpoint"
checkpoint_files="$(find "$WORK/pvc" -type f | wc -l)"
[ "$checkpoint_files" -gt 0 ] || die "no checkpoint files on the shared volume"
echo "image_check: job $JOB SUCCEEDED at step $MAX_STEPS on 2 workers; $checkpoint_files checkpoint files on the shared volume"

# SIGTERM, as Kubernetes stops pods: each must exit 0.
stop() {
  kill -TERM "$1"
  local rc=0
  wait "$1" || rc=$?
  [ "$rc" -eq 0 ] || die "$2 exited with $rc after SIGTERM"
}
for i in 0 1; do stop "${WORKER_PIDS[$i]}" "herd-worker-$i"; done
stop "$COORDINATOR_PID" herd-coordinator
echo "image_check: PASS"
