#!/usr/bin/env bash
# Checks the chart against the real binaries: every flag the chart renders
# is one herd-coordinator / herd-worker accepts (from their --help), and
# the rendered pods run: pod_command.js plays the kubelet (environment,
# volumes, $(VAR) expansion), the test moves addresses to loopback port 0,
# starts the coordinator and a worker with those command lines and waits
# until the worker has registered, in plain and in mutual-TLS setups; and
# two coordinators from the etcd form's command line on a real etcd member:
# one leads, the other answers as a standby that the CLI follows, and takes
# over when the leader is killed; and a coordinator with the etcd TLS
# Secret leads on an etcd with https client URLs and client-cert auth.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/deploy/test/testlib.sh"

COORDINATOR_BIN="$RUNFILES/coordinator/herd-coordinator"
WORKER_BIN="$RUNFILES/worker/daemon/herd-worker"
HERD_BIN="$RUNFILES/client/herd"
ETCD_BIN=/usr/bin/etcd
ETCDCTL_BIN=/usr/bin/etcdctl
USER_TOKEN=0123456789abcdef0123456789abcdef
WORKER_TOKEN=fedcba9876543210fedcba9876543210
TOKENS=auth.userToken=$USER_TOKEN,auth.workerToken=$WORKER_TOKEN
TLS_VALUES=(--set tls.enabled=true,tls.secretName=herd-tls,tls.requireClientCert=true,tls.clientSecretName=herd-client)

# The --flags a binary documents in its --help.
help_flags() {
  "$1" --help | grep -oE '^ +(-[a-zA-Z],)?--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+' | sort -u
}

# flags_known BINARY RENDERING COMPONENT CONTAINER
flags_known() {
  local known rendered flag
  known="$(help_flags "$1")"
  [ -n "$known" ] || die "no flags in $1 --help"
  rendered="$(node "$TEST_DIR/print_args.js" "$CASE_TMP/$2.json" "$3" "$4")"
  [ -n "$rendered" ] || die "$3 renders no args"
  for flag in $(sed 's/=.*//' <<<"$rendered"); do
    grep -qxF -- "$flag" <<<"$known" || die "$3 ($2): $flag is not a flag of $(basename "$1")"
    echo "$3 ($2): $flag ok"
  done
}

render_all() {
  render default --set $TOKENS
  render gpu --set $TOKENS,worker.gpu.enabled=true,worker.gpu.count=2
  render tls --set $TOKENS "${TLS_VALUES[@]}"
  render ha --set $TOKENS --set coordinator.replicas=2,etcd.enabled=true
  render etcd-tls --set $TOKENS --set coordinator.replicas=2 \
    --set 'coordinator.store.etcd.endpoints={https://etcd-0.infra.svc:2379}' \
    --set coordinator.store.etcd.tls.secretName=etcd-client
  render etcd-auth --set $TOKENS --set coordinator.replicas=2 \
    --set 'coordinator.store.etcd.endpoints={etcd-0.infra.svc:2379}' \
    --set coordinator.store.etcd.auth.secretName=etcd-herd-user
  render extra --set $TOKENS --set 'coordinator.extraArgs={--tls-require-client-cert}' \
    --set 'worker.extraArgs={--trainer-kill-grace-seconds=9}'
}

coordinator_flags_are_known() {
  for rendering in default tls extra ha etcd-tls etcd-auth; do
    flags_known "$COORDINATOR_BIN" "$rendering" coordinator coordinator
  done
}

# The chart's etcd (etcd.enabled) runs etcd 3.5 by default; Debian's 3.4
# here must know every flag it renders too (3.4 or later is supported).
etcd_flags_are_known() {
  if [ ! -x "$ETCD_BIN" ]; then
    echo "SKIP: $ETCD_BIN is missing (Debian's etcd-server; scripts/setup.sh installs it)"
    return 0
  fi
  flags_known "$ETCD_BIN" ha etcd etcd
}

worker_flags_are_known() {
  for rendering in default gpu tls extra; do
    flags_known "$WORKER_BIN" "$rendering" worker worker
  done
}

wait_for_file() {
  local file="$1" pid="$2" what="$3"
  for _ in $(seq 150); do
    [ -s "$file" ] && return 0
    kill -0 "$pid" 2>/dev/null || die "$what exited before it was ready"
    sleep 0.2
  done
  die "$what not ready after 30 s"
}

json_field() {
  node -e 'console.log(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))[process.argv[2]])' "$1" "$2"
}

# stop PID WHAT: SIGTERM must end it cleanly.
stop() {
  kill -TERM "$1"
  local rc=0
  wait "$1" || rc=$?
  [ "$rc" -eq 0 ] || die "$2 exited with $rc after SIGTERM"
}

# run_rendered_pods RENDERING [pod_command options for both pods...]
run_rendered_pods() {
  local rendering="$1"
  shift
  local dir="$CASE_TMP/pods-$rendering"
  mkdir -p "$dir"
  # Globals: the EXIT trap (this case's subshell ending early) needs them.
  POD_PIDS=()
  POD_DIR="$dir"
  trap 'kill "${POD_PIDS[@]}" 2>/dev/null; tail -n 30 "$POD_DIR"/*.log 2>/dev/null' EXIT

  node "$TEST_DIR/pod_command.js" "$CASE_TMP/$rendering.json" coordinator coordinator "$dir/coordinator" \
    --pod-name herd-coordinator-0 --writes --state-dir "$@" \
    --set --listen=127.0.0.1:0 --set --metrics-listen=127.0.0.1:0 \
    --add --ready-file="$dir/coordinator-ready.json" >"$dir/coordinator.argv"
  mapfile -d '' argv <"$dir/coordinator.argv"
  [ "${argv[0]}" = herd-coordinator ] || die "the coordinator container runs ${argv[0]}"
  echo "coordinator: ${argv[*]:1}"
  "$COORDINATOR_BIN" "${argv[@]:1}" >"$dir/coordinator.log" 2>&1 &
  local coordinator=$!
  POD_PIDS+=("$coordinator")
  wait_for_file "$dir/coordinator-ready.json" "$coordinator" herd-coordinator
  local address
  address="$(json_field "$dir/coordinator-ready.json" listen)"

  # The trainer is only started for a job; any executable does here.
  printf '#!/bin/sh\nexit 0\n' >"$dir/herd-trainer"
  chmod +x "$dir/herd-trainer"
  node "$TEST_DIR/pod_command.js" "$CASE_TMP/$rendering.json" worker worker "$dir/worker" \
    --pod-name herd-worker-0 --pod-ip 127.0.0.1 --writes --work-dir --writes --ready-file "$@" \
    --set --coordinator="$address" --set --metrics-listen=127.0.0.1:0 --set --health-listen=127.0.0.1:0 \
    --set --trainer-binary="$dir/herd-trainer" >"$dir/worker.argv"
  mapfile -d '' argv <"$dir/worker.argv"
  [ "${argv[0]}" = herd-worker ] || die "the worker container runs ${argv[0]}"
  echo "worker: ${argv[*]:1}"
  "$WORKER_BIN" "${argv[@]:1}" >"$dir/worker.log" 2>&1 &
  local worker=$!
  POD_PIDS+=("$worker")
  # The worker writes its ready file once the coordinator has registered it.
  wait_for_file "$dir/worker/tmp/herd-worker-ready.json" "$worker" herd-worker
  [ "$(json_field "$dir/worker/tmp/herd-worker-ready.json" worker_id)" = herd-worker-0 ] ||
    die "the worker did not register as its pod name"

  stop "$worker" herd-worker
  stop "$coordinator" herd-coordinator
  trap - EXIT
}

rendered_pods_run() {
  run_rendered_pods default
}

existing_secret_pods_run() {
  render existing --set auth.existingAuthSecret=ml-auth,auth.existingWorkerTokenSecret=ml-worker-token
  local hash
  hash="$(printf %s "$WORKER_TOKEN" | sha256sum | cut -d' ' -f1)"
  printf '{"ml-auth": {"auth": "ml-workers worker sha256:%s herd-worker-*\\n"}, "ml-worker-token": {"token": "%s\\n"}}' \
    "$hash" "$WORKER_TOKEN" >"$CASE_TMP/existing-secrets.json"
  run_rendered_pods existing --secrets "$CASE_TMP/existing-secrets.json"
}

# A CA, a server certificate for 127.0.0.1 and a client certificate, as the
# Secrets tls.secretName and tls.clientSecretName would hold them.
make_tls_secrets() {
  local d="$CASE_TMP/pki"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=herd-test-ca -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  for who in server client; do
    local usage=serverAuth
    [ "$who" = client ] && usage=clientAuth
    openssl req -newkey rsa:2048 -nodes -subj "/CN=herd-$who" -keyout "$d/$who.key" -out "$d/$who.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=%s\n' "$usage" >"$d/$who.ext"
    openssl x509 -req -in "$d/$who.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
      -extfile "$d/$who.ext" -out "$d/$who.crt" 2>/dev/null
  done
  node -e '
    const fs = require("fs"), d = process.argv[1], read = (f) => fs.readFileSync(`${d}/${f}`, "utf8");
    fs.writeFileSync(process.argv[2], JSON.stringify({
      "herd-tls": {"tls.crt": read("server.crt"), "tls.key": read("server.key"), "ca.crt": read("ca.crt")},
      "herd-client": {"tls.crt": read("client.crt"), "tls.key": read("client.key")},
    }));' "$d" "$CASE_TMP/tls-secrets.json"
}

mutual_tls_pods_run() {
  make_tls_secrets
  run_rendered_pods tls --secrets "$CASE_TMP/tls-secrets.json"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_leading READY_FILE PID WHAT: until the ready file says "leading": true.
wait_leading() {
  for _ in $(seq 300); do
    [ -s "$1" ] && [ "$(json_field "$1" leading)" = true ] && return 0
    kill -0 "$2" 2>/dev/null || die "$3 exited before it led"
    sleep 0.1
  done
  die "$3 did not lead within 30 s"
}

# start_etcd DIR SCHEME [FLAGS...]: one etcd member on free loopback ports,
# client URLs SCHEME://, its pid in POD_PIDS and its client port in
# ETCD_CLIENT_PORT.
start_etcd() {
  local dir="$1" scheme="$2" peer
  shift 2
  ETCD_CLIENT_PORT="$(free_port)"
  peer="$(free_port)"
  "$ETCD_BIN" --name=e0 --data-dir="$dir/etcd" --listen-client-urls="$scheme://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="$scheme://127.0.0.1:$ETCD_CLIENT_PORT" --listen-peer-urls="http://127.0.0.1:$peer" \
    --initial-advertise-peer-urls="http://127.0.0.1:$peer" --initial-cluster="e0=http://127.0.0.1:$peer" \
    --logger=zap --log-level=warn "$@" >"$dir/etcd.log" 2>&1 &
  POD_PIDS+=($!)
}

# Two coordinators as the etcd form renders them (your etcd: a real member
# here), each with its own port and advertised address as its pod IP would
# give it.
ha_coordinators_run() {
  if [ ! -x "$ETCD_BIN" ]; then
    echo "SKIP: $ETCD_BIN is missing (Debian's etcd-server; scripts/setup.sh installs it)"
    return 0
  fi
  local dir="$CASE_TMP/pods-ha"
  mkdir -p "$dir"
  POD_PIDS=()
  POD_DIR="$dir"
  trap 'kill -9 "${POD_PIDS[@]}" 2>/dev/null; tail -n 30 "$POD_DIR"/*.log 2>/dev/null' EXIT
  start_etcd "$dir" http
  local client="$ETCD_CLIENT_PORT"
  render ha-run --set $TOKENS --set coordinator.replicas=2 --set "coordinator.store.etcd.endpoints={127.0.0.1:$client}"
  local pids=() addresses=() i
  for i in 0 1; do
    local port
    port="$(free_port)"
    addresses+=("127.0.0.1:$port")
    node "$TEST_DIR/pod_command.js" "$CASE_TMP/ha-run.json" coordinator coordinator "$dir/coordinator-$i" \
      --pod-name "herd-coordinator-$i" --pod-ip 127.0.0.1 \
      --set --listen="127.0.0.1:$port" --set --advertise="127.0.0.1:$port" --set --metrics-listen=127.0.0.1:0 \
      --add --ready-file="$dir/coordinator-$i.json" >"$dir/coordinator-$i.argv"
    mapfile -d '' argv <"$dir/coordinator-$i.argv"
    echo "coordinator $i: ${argv[*]:1}"
    "$COORDINATOR_BIN" "${argv[@]:1}" >"$dir/coordinator-$i.log" 2>&1 &
    pids+=($!)
    POD_PIDS+=($!)
    # The first leads before the second starts.
    [ "$i" = 0 ] && wait_leading "$dir/coordinator-0.json" "${pids[0]}" "coordinator 0"
  done
  wait_for_file "$dir/coordinator-1.json" "${pids[1]}" "coordinator 1"
  [ "$(json_field "$dir/coordinator-1.json" leading)" = false ] || die "both coordinators lead"
  # The CLI given the standby alone is sent on to the leader.
  (umask 077; printf '%s\n' "$USER_TOKEN" >"$dir/user-token")
  HERD_TOKEN_FILE="$dir/user-token" "$HERD_BIN" --coordinator "${addresses[1]}" list ||
    die "the CLI did not reach the leader through the standby"
  kill -9 "${pids[0]}"
  wait_leading "$dir/coordinator-1.json" "${pids[1]}" "coordinator 1 (after the leader was killed)"
  HERD_TOKEN_FILE="$dir/user-token" "$HERD_BIN" --coordinator "${addresses[0]},${addresses[1]}" list ||
    die "the CLI did not reach the new leader"
  stop "${pids[1]}" herd-coordinator
  trap - EXIT
  kill -9 "${POD_PIDS[@]}" 2>/dev/null || true
}

# A coordinator as the etcd TLS form renders it, on an etcd that serves
# https and requires client certificates (as under Kubernetes): the
# Secret's files reach it and it leads.
etcd_tls_coordinator_runs() {
  if [ ! -x "$ETCD_BIN" ]; then
    echo "SKIP: $ETCD_BIN is missing (Debian's etcd-server; scripts/setup.sh installs it)"
    return 0
  fi
  make_tls_secrets
  local dir="$CASE_TMP/pods-etcd-tls" pki="$CASE_TMP/pki"
  mkdir -p "$dir"
  POD_PIDS=()
  POD_DIR="$dir"
  trap 'kill -9 "${POD_PIDS[@]}" 2>/dev/null; tail -n 30 "$POD_DIR"/*.log 2>/dev/null' EXIT
  start_etcd "$dir" https --cert-file="$pki/server.crt" --key-file="$pki/server.key" \
    --trusted-ca-file="$pki/ca.crt" --client-cert-auth
  node -e '
    const fs = require("fs"), d = process.argv[1], read = (f) => fs.readFileSync(`${d}/${f}`, "utf8");
    fs.writeFileSync(process.argv[2], JSON.stringify({
      "etcd-client": {"ca.crt": read("ca.crt"), "tls.crt": read("client.crt"), "tls.key": read("client.key")},
    }));' "$pki" "$CASE_TMP/etcd-tls-secrets.json"
  render etcd-tls-run --set $TOKENS --set "coordinator.store.etcd.endpoints={https://127.0.0.1:$ETCD_CLIENT_PORT}" \
    --set coordinator.store.etcd.tls.secretName=etcd-client
  local port
  port="$(free_port)"
  node "$TEST_DIR/pod_command.js" "$CASE_TMP/etcd-tls-run.json" coordinator coordinator "$dir/coordinator" \
    --pod-name herd-coordinator-0 --pod-ip 127.0.0.1 --secrets "$CASE_TMP/etcd-tls-secrets.json" \
    --set --listen="127.0.0.1:$port" --set --advertise="127.0.0.1:$port" --set --metrics-listen=127.0.0.1:0 \
    --add --ready-file="$dir/coordinator.json" >"$dir/coordinator.argv"
  mapfile -d '' argv <"$dir/coordinator.argv"
  echo "coordinator: ${argv[*]:1}"
  "$COORDINATOR_BIN" "${argv[@]:1}" >"$dir/coordinator.log" 2>&1 &
  local coordinator=$!
  POD_PIDS+=("$coordinator")
  wait_leading "$dir/coordinator.json" "$coordinator" "the coordinator on etcd over TLS"
  stop "$coordinator" herd-coordinator
  trap - EXIT
  kill -9 "${POD_PIDS[@]}" 2>/dev/null || true
}

# A coordinator as the etcd auth form renders it, on an etcd with its
# authentication on and a user whose role may read and write the release's
# prefix (made with etcdctl, as an operator does): the user reaches it from
# the Secret's username through the environment, the password as a file,
# and it leads.
etcd_auth_coordinator_runs() {
  if [ ! -x "$ETCD_BIN" ] || [ ! -x "$ETCDCTL_BIN" ]; then
    echo "SKIP: $ETCD_BIN or $ETCDCTL_BIN is missing (Debian's etcd-server and etcd-client; scripts/setup.sh installs them)"
    return 0
  fi
  local dir="$CASE_TMP/pods-etcd-auth" prefix=/herd-run/
  mkdir -p "$dir"
  POD_PIDS=()
  POD_DIR="$dir"
  trap 'kill -9 "${POD_PIDS[@]}" 2>/dev/null; tail -n 30 "$POD_DIR"/*.log 2>/dev/null' EXIT
  start_etcd "$dir" http
  local etcdctl=(env ETCDCTL_API=3 "$ETCDCTL_BIN" --endpoints="127.0.0.1:$ETCD_CLIENT_PORT" --dial-timeout=5s)
  for _ in $(seq 100); do
    "${etcdctl[@]}" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
  {
    "${etcdctl[@]}" user add root --new-user-password=root-pass &&
      "${etcdctl[@]}" role add root &&
      "${etcdctl[@]}" user grant-role root root &&
      "${etcdctl[@]}" role add herd-rw &&
      "${etcdctl[@]}" role grant-permission herd-rw --prefix=true readwrite "$prefix" &&
      "${etcdctl[@]}" user add herd --new-user-password=herd-pass &&
      "${etcdctl[@]}" user grant-role herd herd-rw &&
      "${etcdctl[@]}" auth enable
  } >"$dir/etcdctl.log" 2>&1 || die "etcdctl could not set up etcd's users: $(cat "$dir/etcdctl.log")"
  printf '{"etcd-herd-user": {"username": "herd", "password": "herd-pass\\n"}}' >"$CASE_TMP/etcd-auth-secrets.json"
  render etcd-auth-run --set $TOKENS --set "coordinator.store.etcd.endpoints={127.0.0.1:$ETCD_CLIENT_PORT}" \
    --set coordinator.store.etcd.auth.secretName=etcd-herd-user,coordinator.store.etcd.prefix=$prefix
  local port
  port="$(free_port)"
  node "$TEST_DIR/pod_command.js" "$CASE_TMP/etcd-auth-run.json" coordinator coordinator "$dir/coordinator" \
    --pod-name herd-coordinator-0 --pod-ip 127.0.0.1 --secrets "$CASE_TMP/etcd-auth-secrets.json" \
    --set --listen="127.0.0.1:$port" --set --advertise="127.0.0.1:$port" --set --metrics-listen=127.0.0.1:0 \
    --add --ready-file="$dir/coordinator.json" >"$dir/coordinator.argv"
  mapfile -d '' argv <"$dir/coordinator.argv"
  echo "coordinator: ${argv[*]:1}"
  case " ${argv[*]} " in *herd-pass*) die "the etcd password is on the command line" ;; esac
  "$COORDINATOR_BIN" "${argv[@]:1}" >"$dir/coordinator.log" 2>&1 &
  local coordinator=$!
  POD_PIDS+=("$coordinator")
  wait_leading "$dir/coordinator.json" "$coordinator" "the coordinator as etcd user herd"
  stop "$coordinator" herd-coordinator
  trap - EXIT
  kill -9 "${POD_PIDS[@]}" 2>/dev/null || true
}

[ -x "$COORDINATOR_BIN" ] && [ -x "$WORKER_BIN" ] && [ -x "$HERD_BIN" ] || die "missing binaries under $RUNFILES"
render_all || die "rendering failed"
run_case coordinator_flags_are_known coordinator_flags_are_known
run_case worker_flags_are_known worker_flags_are_known
run_case etcd_flags_are_known etcd_flags_are_known
run_case rendered_pods_run rendered_pods_run
run_case existing_secret_pods_run existing_secret_pods_run
run_case mutual_tls_pods_run mutual_tls_pods_run
run_case ha_coordinators_run ha_coordinators_run
run_case etcd_tls_coordinator_runs etcd_tls_coordinator_runs
run_case etcd_auth_coordinator_runs etcd_auth_coordinator_runs
finish
