{{/* Names, labels and small pieces shared by the templates. */}}

{{- define "herd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* RELEASE-herd, or RELEASE when it already says herd; 63 characters at
most because names end up in DNS labels. */}}
{{- define "herd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "herd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The component names leave room for the StatefulSet's "-N" suffix and
the controller-revision hash label. */}}
{{- define "herd.coordinatorName" -}}
{{- printf "%s-coordinator" (include "herd.fullname" . | trunc 40 | trimSuffix "-") -}}
{{- end -}}

{{- define "herd.workerName" -}}
{{- printf "%s-worker" (include "herd.fullname" . | trunc 40 | trimSuffix "-") -}}
{{- end -}}

{{- define "herd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "herd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "herd.labels" -}}
helm.sh/chart: {{ include "herd.chart" . }}
{{ include "herd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: herd
{{- end -}}

{{/* Called with (dict "root" $ "component" "coordinator"). */}}
{{- define "herd.componentSelectorLabels" -}}
{{ include "herd.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "herd.componentLabels" -}}
{{ include "herd.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Called with (dict "root" $ "image" .Values.coordinator.image). */}}
{{- define "herd.image" -}}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- with .root.Values.image.registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .) $.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "herd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "herd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Credentials: users, workers and an optional admin each hold their own
token (docs/security.md). Either the chart makes the Secrets from the
tokens in values, or the operator brings the coordinator's auth file and the
workers' token. herd never runs without them. */}}
{{- define "herd.checkAuth" -}}
{{- $auth := .Values.auth -}}
{{- if $auth.existingAuthSecret -}}
{{- if or $auth.userToken $auth.workerToken $auth.adminToken -}}
{{- fail "auth: with auth.existingAuthSecret the tokens live in your Secrets; do not also set auth.userToken, auth.workerToken or auth.adminToken" -}}
{{- end -}}
{{- $_ := required "auth.existingWorkerTokenSecret is required with auth.existingAuthSecret: the workers need the token whose hash your auth file lists" $auth.existingWorkerTokenSecret -}}
{{- else -}}
{{- $_ := required "auth.userToken and auth.workerToken are required (separate tokens for people and for workers): generate each with `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'` and pass --set-file auth.userToken=...,auth.workerToken=..., or bring your own Secrets with auth.existingAuthSecret and auth.existingWorkerTokenSecret" $auth.userToken -}}
{{- $_ := required "auth.workerToken is required: workers hold their own token, not the users'" $auth.workerToken -}}
{{- if eq (trim $auth.userToken) (trim $auth.workerToken) -}}
{{- fail "auth: auth.userToken and auth.workerToken must differ: one token for both would give every user a worker's rights" -}}
{{- end -}}
{{- if $auth.existingWorkerTokenSecret -}}
{{- fail "auth: auth.existingWorkerTokenSecret goes with auth.existingAuthSecret; with auth.workerToken the chart makes that Secret" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The coordinator's auth file (key "auth"): principals, roles, token hashes. */}}
{{- define "herd.authSecretName" -}}
{{- include "herd.checkAuth" . -}}
{{- .Values.auth.existingAuthSecret | default (printf "%s-auth" (include "herd.fullname" .)) -}}
{{- end -}}

{{/* The workers' token (key "token"); their trainers use it too. */}}
{{- define "herd.workerTokenSecretName" -}}
{{- include "herd.checkAuth" . -}}
{{- .Values.auth.existingWorkerTokenSecret | default (printf "%s-worker-token" (include "herd.fullname" .)) -}}
{{- end -}}

{{/* The users' token (key "token"), for people's `herd` CLI; no pod mounts it. */}}
{{- define "herd.userTokenSecretName" -}}
{{- printf "%s-user-token" (include "herd.fullname" .) -}}
{{- end -}}

{{- define "herd.adminTokenSecretName" -}}
{{- printf "%s-admin-token" (include "herd.fullname" .) -}}
{{- end -}}

{{/* The auth file the chart renders: hashes only (herd trims token files, so
the hash is of the trimmed token). */}}
{{- define "herd.authFileContent" -}}
# Rendered by the herd chart. PRINCIPAL ROLE CREDENTIAL [WORKER-IDS]
{{ .Values.auth.userName }} user sha256:{{ trim .Values.auth.userToken | sha256sum }}
workers worker sha256:{{ trim .Values.auth.workerToken | sha256sum }} {{ include "herd.workerName" . }}-*
{{- if .Values.auth.adminToken }}
admin admin sha256:{{ trim .Values.auth.adminToken | sha256sum }}
{{- end }}
{{ end -}}

{{- define "herd.tlsSecretName" -}}
{{- required "tls.secretName is required when tls.enabled is true: an existing Secret with tls.crt, tls.key and ca.crt" .Values.tls.secretName -}}
{{- end -}}

{{- define "herd.tlsClientSecretName" -}}
{{- required "tls.clientSecretName is required when tls.requireClientCert is true: workers need a client certificate (a Secret with tls.crt and tls.key)" .Values.tls.clientSecretName -}}
{{- end -}}

{{/* host:port workers, trainers and in-cluster clients dial; a TLS
certificate must name this host. */}}
{{- define "herd.coordinatorAddress" -}}
{{- printf "%s.%s.svc:%d" (include "herd.coordinatorName" .) .Release.Namespace (int .Values.coordinator.grpcPort) -}}
{{- end -}}

{{- define "herd.configMapName" -}}
{{- printf "%s-config" (include "herd.fullname" .) -}}
{{- end -}}

{{- define "herd.checkpointClaimName" -}}
{{- .Values.checkpoints.existingClaim | default (printf "%s-checkpoints" (include "herd.fullname" .)) -}}
{{- end -}}

{{- define "herd.stateClaimName" -}}
{{- .Values.coordinator.persistence.existingClaim | default (printf "%s-state" (include "herd.coordinatorName" .)) -}}
{{- end -}}

{{- define "herd.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ int .Values.podSecurity.runAsUser }}
runAsGroup: {{ int .Values.podSecurity.runAsGroup }}
fsGroup: {{ int .Values.podSecurity.fsGroup }}
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "herd.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Annotations that roll the pods when the settings or the token change. */}}
{{- define "herd.configChecksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/auth: {{ .Values.auth | toJson | sha256sum }}
{{- end -}}

{{/* Empty when metrics.scrapeAnnotations is off. */}}
{{- define "herd.scrapeAnnotations" -}}
{{- if .root.Values.metrics.scrapeAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/* A PVC spec from a persistence block. */}}
{{- define "herd.claimSpec" -}}
accessModes:
  {{- toYaml .accessModes | nindent 2 }}
{{- if .storageClass }}
storageClassName: {{ if eq .storageClass "-" }}""{{ else }}{{ .storageClass | quote }}{{ end }}
{{- end }}
resources:
  requests:
    storage: {{ .size | quote }}
{{- end -}}

{{/* Where a herd container finds its token: the workers' token Secret in
worker pods, the users' in an in-cluster CLI pod (the ConfigMap's
HERD_TOKEN_FILE). */}}
{{- define "herd.tokenFile" -}}
/etc/herd/auth/token
{{- end -}}

{{/* Where the coordinator finds its auth file. */}}
{{- define "herd.authFilePath" -}}
/etc/herd/auth/auth
{{- end -}}

{{/* A label map as "k1=v1, k2=v2", for messages. */}}
{{- define "herd.labelList" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join ", " $pairs -}}
{{- end -}}

{{/*
The worker's --drain-timeout-seconds, checked against the pod's grace
period: Kubernetes kills the pod at the end of it, so the drain and the
trainers' stop must both fit.
*/}}
{{- define "herd.workerDrainTimeout" -}}
{{- $w := .Values.worker -}}
{{- if le (int $w.terminationGracePeriodSeconds) (add (int $w.drainTimeoutSeconds) (int $w.trainerKillGraceSeconds)) -}}
{{- fail (printf "worker.terminationGracePeriodSeconds (%d) must exceed worker.drainTimeoutSeconds (%d) plus worker.trainerKillGraceSeconds (%d): Kubernetes would kill a draining worker before its jobs released it" (int $w.terminationGracePeriodSeconds) (int $w.drainTimeoutSeconds) (int $w.trainerKillGraceSeconds)) -}}
{{- end -}}
{{- int $w.drainTimeoutSeconds -}}
{{- end -}}

{{/* The chart's own etcd (etcd.enabled): the StatefulSet and its headless
Service share this name; member N is NAME-N.NAME.NAMESPACE.svc. */}}
{{- define "herd.etcdName" -}}
{{- printf "%s-etcd" (include "herd.fullname" . | trunc 40 | trimSuffix "-") -}}
{{- end -}}

{{/* The client endpoints of the chart's etcd members, "host:port,...". */}}
{{- define "herd.etcdMemberEndpoints" -}}
{{- $name := include "herd.etcdName" . -}}
{{- $endpoints := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $endpoints = append $endpoints (printf "%s-%d.%s.%s.svc:%d" $name $i $name $.Release.Namespace (int $.Values.etcd.clientPort)) -}}
{{- end -}}
{{- join "," $endpoints -}}
{{- end -}}

{{/* --initial-cluster of the chart's etcd: every member's peer URL. */}}
{{- define "herd.etcdInitialCluster" -}}
{{- $name := include "herd.etcdName" . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $members = append $members (printf "%s-%d=http://%s-%d.%s.%s.svc:%d" $name $i $name $i $name $.Release.Namespace (int $.Values.etcd.peerPort)) -}}
{{- end -}}
{{- join "," $members -}}
{{- end -}}

{{/* The Secret with the coordinators' TLS files for etcd, or "" for plain
HTTP. Only for your etcd: the chart's own serves plain HTTP. */}}
{{- define "herd.coordinatorEtcdTlsSecret" -}}
{{- $secret := .Values.coordinator.store.etcd.tls.secretName -}}
{{- if and $secret (not .Values.coordinator.store.etcd.endpoints) -}}
{{- fail "coordinator.store.etcd.tls.secretName is set, but the coordinators reach no etcd of yours: set coordinator.store.etcd.endpoints (the chart's own etcd, etcd.enabled, serves plain HTTP)" -}}
{{- end -}}
{{- $secret -}}
{{- end -}}

{{/* The Secret with the etcd user the coordinators authenticate as (keys
username and password), or "" for none. Only for your etcd: the chart's own
has no users. */}}
{{- define "herd.coordinatorEtcdAuthSecret" -}}
{{- $secret := .Values.coordinator.store.etcd.auth.secretName -}}
{{- if and $secret (not .Values.coordinator.store.etcd.endpoints) -}}
{{- fail "coordinator.store.etcd.auth.secretName is set, but the coordinators reach no etcd of yours: set coordinator.store.etcd.endpoints (the chart's own etcd, etcd.enabled, has no users)" -}}
{{- end -}}
{{- $secret -}}
{{- end -}}

{{/* Where the coordinators keep their state: "etcd://host:port,..." (an
external etcd, or the chart's own), or "" for SQLite on the state PVC. Also
refuses what cannot work: two stores at once, or several coordinators on
one SQLite database (it has one writer). */}}
{{- define "herd.coordinatorEtcdStore" -}}
{{- $external := .Values.coordinator.store.etcd.endpoints -}}
{{- if and $external .Values.etcd.enabled -}}
{{- fail "coordinator.store.etcd.endpoints and etcd.enabled are both set: use your etcd (endpoints) or the chart's (etcd.enabled), not both" -}}
{{- end -}}
{{- if $external -}}
{{- printf "etcd://%s" (join "," $external) -}}
{{- else if .Values.etcd.enabled -}}
{{- printf "etcd://%s" (include "herd.etcdMemberEndpoints" .) -}}
{{- else if gt (int .Values.coordinator.replicas) 1 -}}
{{- fail (printf "coordinator.replicas is %d, but the state is in SQLite, which has one writer: run 1 coordinator, or give the coordinators etcd to elect a leader in (coordinator.store.etcd.endpoints for your etcd, or etcd.enabled=true for the chart's)" (int .Values.coordinator.replicas)) -}}
{{- end -}}
{{- end -}}

{{/* The etcd key prefix of this release's state and leader key. */}}
{{- define "herd.etcdPrefix" -}}
{{- .Values.coordinator.store.etcd.prefix | default (printf "/herd/%s/%s/" .Release.Namespace .Release.Name) -}}
{{- end -}}
