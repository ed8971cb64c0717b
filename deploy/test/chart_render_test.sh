#!/usr/bin/env bash
# Renders the Helm chart (deploy/helm/herd) with helm-render in the
# configurations people install, validates every object against the
# Kubernetes schemas and checks what the objects must do (check_chart.js);
# checks that bad values are refused with the chart's messages.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/deploy/test/testlib.sh"

USER_TOKEN=0123456789abcdef0123456789abcdef
WORKER_TOKEN=fedcba9876543210fedcba9876543210
TOKENS=auth.userToken=$USER_TOKEN,auth.workerToken=$WORKER_TOKEN

# The schema packages, from the committed lock file, into the ignored
# deploy/test/node_modules of the checkout; again only when the lock changed.
ensure_node_modules() {
  local dir="$SOURCE_ROOT/deploy/test"
  local stamp="$dir/node_modules/.installed-package-lock.json"
  command -v node >/dev/null || die "node is missing (scripts/setup.sh installs it)"
  command -v npm >/dev/null || die "npm is missing (scripts/setup.sh installs it)"
  cmp -s "$dir/package-lock.json" "$stamp" && return 0
  (
    flock 9 # one install at a time
    cmp -s "$dir/package-lock.json" "$stamp" && exit 0
    echo "installing the Kubernetes schema packages into $dir/node_modules"
    # In the folder rather than --prefix, which would also move npm's
    # global config (and with it a configured cafile).
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) ||
      die "npm ci in $dir failed: the tests need the npm registry once to install kubernetes-models"
    cp "$dir/package-lock.json" "$stamp"
  ) 9<"$dir/package.json" || exit 1
}

# valid NAME SCENARIO [FACTS...]: schema-validates and checks a rendering.
valid() {
  local name="$1" scenario="$2"
  shift 2
  NODE_PATH="$SOURCE_ROOT/deploy/test/node_modules" node "$TEST_DIR/validate_k8s.js" "$CASE_TMP/$name.json"
  node "$TEST_DIR/check_chart.js" "$scenario" "$CASE_TMP/$name.json" "$@"
}

# refused EXPECTED_MESSAGE HELM_RENDER_ARGS...: rendering must fail with it.
refused() {
  local expected="$1"
  shift
  if "$HELM_RENDER" --chart "$CHART" "$@" >"$CASE_TMP/refused.out" 2>"$CASE_TMP/refused.err"; then
    die "rendering with $* succeeded; expected: $expected"
  fi
  cat "$CASE_TMP/refused.err"
  grep -qF -- "$expected" "$CASE_TMP/refused.err" || die "the error does not say: $expected"
}

default_values() {
  render default --set $TOKENS
  valid default default userToken=$USER_TOKEN workerToken=$WORKER_TOKEN
}

release_name_and_namespace() {
  render named --release ml --namespace training --set $TOKENS
  valid named default userToken=$USER_TOKEN workerToken=$WORKER_TOKEN release=ml-herd namespace=training
}

gpu_workers() {
  render gpu --set $TOKENS --set worker.gpu.enabled=true,worker.gpu.count=4 \
    --set worker.gpu.nodeSelector.accelerator=h100
  valid gpu gpu gpus=4 nodeLabel=accelerator=h100
}

tls_and_mutual_tls() {
  render tls --set $TOKENS --set tls.enabled=true,tls.secretName=herd-tls \
    --set tls.requireClientCert=true,tls.clientSecretName=herd-client
  valid tls tls secret=herd-tls clientSecret=herd-client
}

existing_secrets() {
  render existing --set auth.existingAuthSecret=ml-auth,auth.existingWorkerTokenSecret=ml-worker-token
  valid existing existing-secret authSecret=ml-auth workerSecret=ml-worker-token
}

service_monitor_instead_of_annotations() {
  local values="$CASE_TMP/monitoring-values.yaml"
  printf '%s\n' "auth: {userToken: $USER_TOKEN, workerToken: $WORKER_TOKEN}" "metrics:" "  scrapeAnnotations: false" \
    "  serviceMonitor: {enabled: true, labels: {release: prometheus}}" "networkPolicy: {enabled: false}" >"$values"
  render monitoring -f "$values"
  valid monitoring monitoring
}

# Coordinators on etcd: a leader and standbys, only the leader Ready.
ha_with_your_etcd() {
  render ha-external --set $TOKENS --set coordinator.replicas=3 \
    --set 'coordinator.store.etcd.endpoints={etcd-0.infra.svc:2379,etcd-1.infra.svc:2379,etcd-2.infra.svc:2379}'
  valid ha-external ha-external replicas=3 \
    endpoints=etcd-0.infra.svc:2379,etcd-1.infra.svc:2379,etcd-2.infra.svc:2379
}

ha_with_the_charts_etcd() {
  render ha-etcd --release ml --namespace training --set $TOKENS --set coordinator.replicas=2,etcd.enabled=true
  valid ha-etcd ha-etcd replicas=2 etcdMembers=3 releaseName=ml namespace=training
  render ha-etcd5 --set $TOKENS --set coordinator.replicas=2,etcd.enabled=true,etcd.replicas=5
  valid ha-etcd5 ha-etcd replicas=2 etcdMembers=5
}

# Your etcd over TLS, as under Kubernetes: mutual TLS (the default), or only
# etcd's certificate checked; the chart's own etcd and SQLite refuse it.
etcd_over_tls() {
  render etcd-mtls --set $TOKENS --set coordinator.replicas=2 \
    --set 'coordinator.store.etcd.endpoints={https://etcd-0.infra.svc:2379,https://etcd-1.infra.svc:2379}' \
    --set coordinator.store.etcd.tls.secretName=etcd-client
  valid etcd-mtls etcd-tls replicas=2 secret=etcd-client clientCert=true
  render etcd-server-tls --set $TOKENS --set 'coordinator.store.etcd.endpoints={etcd-0.infra.svc:2379}' \
    --set coordinator.store.etcd.tls.secretName=etcd-ca,coordinator.store.etcd.tls.clientCert=false
  valid etcd-server-tls etcd-tls replicas=1 secret=etcd-ca clientCert=false
  refused "coordinator.store.etcd.tls.secretName is set, but the coordinators reach no etcd of yours" \
    --set $TOKENS,coordinator.replicas=2,etcd.enabled=true,coordinator.store.etcd.tls.secretName=etcd-client
  refused "coordinator.store.etcd.tls.secretName is set, but the coordinators reach no etcd of yours" \
    --set $TOKENS,coordinator.store.etcd.tls.secretName=etcd-client
}

# Your etcd with user/password authentication, alone and over TLS; the
# chart's own etcd (no users) and SQLite refuse it.
etcd_with_a_user() {
  render etcd-auth --set $TOKENS --set coordinator.replicas=2 \
    --set 'coordinator.store.etcd.endpoints={etcd-0.infra.svc:2379}' \
    --set coordinator.store.etcd.auth.secretName=etcd-herd-user
  valid etcd-auth etcd-auth replicas=2 secret=etcd-herd-user tls=false
  render etcd-auth-tls --set $TOKENS --set 'coordinator.store.etcd.endpoints={https://etcd-0.infra.svc:2379}' \
    --set coordinator.store.etcd.auth.secretName=etcd-herd-user,coordinator.store.etcd.tls.secretName=etcd-ca \
    --set coordinator.store.etcd.tls.clientCert=false
  valid etcd-auth-tls etcd-auth replicas=1 secret=etcd-herd-user tls=true
  refused "coordinator.store.etcd.auth.secretName is set, but the coordinators reach no etcd of yours" \
    --set $TOKENS,coordinator.replicas=2,etcd.enabled=true,coordinator.store.etcd.auth.secretName=etcd-herd-user
  refused "coordinator.store.etcd.auth.secretName is set, but the coordinators reach no etcd of yours" \
    --set $TOKENS,coordinator.store.etcd.auth.secretName=etcd-herd-user
}

several_coordinators_on_sqlite_are_refused() {
  refused "coordinator.replicas is 2, but the state is in SQLite, which has one writer: run 1 coordinator, or give the coordinators etcd to elect a leader in (coordinator.store.etcd.endpoints for your etcd, or etcd.enabled=true for the chart's)" \
    --set $TOKENS,coordinator.replicas=2
  refused "coordinator.store.etcd.endpoints and etcd.enabled are both set" \
    --set $TOKENS,etcd.enabled=true --set 'coordinator.store.etcd.endpoints={etcd-0.infra.svc:2379}'
  refused "etcd.replicas: etcd.replicas must be one of the following: 1, 3, 5, 7" --set $TOKENS,etcd.enabled=true,etcd.replicas=2
  refused "coordinator.store.etcd.leaseSeconds: Must be greater than or equal to 2" \
    --set $TOKENS,etcd.enabled=true,coordinator.store.etcd.leaseSeconds=1
  refused "coordinator.replicas: Must be greater than or equal to 1" --set $TOKENS,coordinator.replicas=0
}

no_token_is_refused() {
  refused "auth.userToken and auth.workerToken are required (separate tokens for people and for workers)"
  refused "auth.workerToken is required: workers hold their own token" --set auth.userToken=$USER_TOKEN
  refused "auth.userToken and auth.workerToken must differ" \
    --set auth.userToken=$USER_TOKEN,auth.workerToken=$USER_TOKEN
}

token_and_existing_secret_conflict() {
  refused "do not also set auth.userToken, auth.workerToken or auth.adminToken" \
    --set $TOKENS,auth.existingAuthSecret=ml-auth,auth.existingWorkerTokenSecret=ml-worker-token
  refused "auth.existingWorkerTokenSecret is required with auth.existingAuthSecret" \
    --set auth.existingAuthSecret=ml-auth
}

tls_without_secret_is_refused() {
  refused "tls.secretName is required when tls.enabled is true" --set $TOKENS,tls.enabled=true
  refused "tls.clientSecretName is required when tls.requireClientCert is true" \
    --set $TOKENS,tls.enabled=true,tls.secretName=herd-tls,tls.requireClientCert=true
}

schema_rejects_bad_values() {
  refused "worker: Additional property replica is not allowed" --set $TOKENS,worker.replica=3
  refused "worker.replicas: Invalid type. Expected: integer, given: string" --set $TOKENS,worker.replicas=two
  refused "worker.gpu.count: Must be greater than or equal to 1" --set $TOKENS,worker.gpu.count=0
  refused "podSecurity.runAsUser: Must be greater than or equal to 1" --set $TOKENS,podSecurity.runAsUser=0
  refused "auth.userToken: Does not match pattern" --set auth.userToken=short,auth.workerToken=$WORKER_TOKEN
  refused "auth: Additional property token is not allowed" --set $TOKENS,auth.token=$USER_TOKEN
  refused "coordinator.extraArgs.0: Does not match pattern" --set $TOKENS --set 'coordinator.extraArgs={-v}'
  refused "worker.terminationGracePeriodSeconds (40) must exceed worker.drainTimeoutSeconds (45)" \
    --set $TOKENS,worker.terminationGracePeriodSeconds=40
}

worker_labels_and_groups() {
  local values="$CASE_TMP/groups-values.yaml"
  printf '%s\n' "auth: {userToken: $USER_TOKEN, workerToken: $WORKER_TOKEN}" "worker:" "  replicas: 1" \
    "  labels: {pool: a100}" "  groups:" "    - {name: east, replicas: 2, zone: us-east-1a, labels: {site: us-east}}" \
    "    - {name: west, replicas: 3, zone: us-west-2b, labels: {zone: w2, pool: h100}}" >"$values"
  render groups -f "$values"
  NODE_PATH="$SOURCE_ROOT/deploy/test/node_modules" node "$TEST_DIR/validate_k8s.js" "$CASE_TMP/groups.json"
  node "$TEST_DIR/check_worker_groups.js" "$CASE_TMP/groups.json"
}

worker_labels_are_checked() {
  refused "worker.labels.pool: Does not match pattern" --set $TOKENS --set 'worker.labels.pool=a 100'
  refused "worker.groups.0.name: Does not match pattern" --set $TOKENS --set 'worker.groups[0].name=East,worker.groups[0].replicas=1'
  refused "worker.groups.0: replicas is required" --set $TOKENS --set 'worker.groups[0].name=east'
  refused "StatefulSet name a-very-long-release-name-for-training-he-worker-abcdefghijk (for group abcdefghijk) is longer than 52 characters" \
    --release a-very-long-release-name-for-training-herd --set $TOKENS --set 'worker.groups[0].name=abcdefghijk,worker.groups[0].replicas=1'
}

images_provide_what_the_pods_run() {
  render images --set $TOKENS
  node "$TEST_DIR/check_images.js" "$CASE_TMP/images.json" "$RUNFILES/deploy/docker"
}

values_are_documented() {
  node "$TEST_DIR/check_values_doc.js" "$CHART/values.yaml"
}

notes_explain_how_to_connect() {
  "$HELM_RENDER" --chart "$CHART" --set $TOKENS --notes "$CASE_TMP/NOTES.txt" >/dev/null
  cat "$CASE_TMP/NOTES.txt"
  grep -qF "herd-coordinator.default.svc:7070" "$CASE_TMP/NOTES.txt"
  grep -qF "get secret herd-user-token -o jsonpath='{.data.token}'" "$CASE_TMP/NOTES.txt"
  grep -qF "port-forward svc/herd-coordinator 7070:7070" "$CASE_TMP/NOTES.txt"
  if grep -qF "coordinators on etcd" "$CASE_TMP/NOTES.txt"; then die "NOTES.txt speaks of etcd with SQLite"; fi
  "$HELM_RENDER" --chart "$CHART" --set $TOKENS,coordinator.replicas=2,etcd.enabled=true --notes "$CASE_TMP/NOTES-ha.txt" >/dev/null
  cat "$CASE_TMP/NOTES-ha.txt"
  grep -qF "2 coordinators on etcd (StatefulSet herd-etcd, 3 members): one leads and is Ready" "$CASE_TMP/NOTES-ha.txt"
  grep -qF "get endpoints herd-coordinator" "$CASE_TMP/NOTES-ha.txt"
}

ensure_node_modules
run_case default_values default_values
run_case release_name_and_namespace release_name_and_namespace
run_case gpu_workers gpu_workers
run_case tls_and_mutual_tls tls_and_mutual_tls
run_case existing_secrets existing_secrets
run_case service_monitor_instead_of_annotations service_monitor_instead_of_annotations
run_case ha_with_your_etcd ha_with_your_etcd
run_case ha_with_the_charts_etcd ha_with_the_charts_etcd
run_case etcd_over_tls etcd_over_tls
run_case etcd_with_a_user etcd_with_a_user
run_case several_coordinators_on_sqlite_are_refused several_coordinators_on_sqlite_are_refused
run_case no_token_is_refused no_token_is_refused
run_case token_and_existing_secret_conflict token_and_existing_secret_conflict
run_case tls_without_secret_is_refused tls_without_secret_is_refused
run_case schema_rejects_bad_values schema_rejects_bad_values
run_case worker_labels_and_groups worker_labels_and_groups
run_case worker_labels_are_checked worker_labels_are_checked
run_case images_provide_what_the_pods_run images_provide_what_the_pods_run
run_case values_are_documented values_are_documented
run_case notes_explain_how_to_connect notes_explain_how_to_connect
finish
