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

{{/* The Secret holding the bearer token. herd never runs without one. */}}
{{- define "herd.authSecretName" -}}
{{- if and .Values.auth.token .Values.auth.existingSecret -}}
{{- fail "auth: set either auth.token or auth.existingSecret, not both" -}}
{{- end -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else -}}
{{- $_ := required "auth.token or auth.existingSecret is required: every herd RPC carries a bearer token. Generate one with `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'` and pass --set auth.token=..., or name an existing Secret with --set auth.existingSecret=NAME" .Values.auth.token -}}
{{- printf "%s-auth" (include "herd.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "herd.authSecretKey" -}}
{{- if .Values.auth.existingSecret -}}{{ .Values.auth.existingSecretKey }}{{- else -}}token{{- end -}}
{{- end -}}

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

{{/* Where the token Secret is mounted in every herd container. */}}
{{- define "herd.tokenFile" -}}
/etc/herd/auth/token
{{- end -}}

{{/* A label map as "k1=v1, k2=v2", for messages. */}}
{{- define "herd.labelList" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join ", " $pairs -}}
{{- end -}}
