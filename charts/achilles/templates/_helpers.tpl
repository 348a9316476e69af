{{/* Names, labels and the security settings every workload of the chart shares. */}}

{{- define "achilles.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "achilles.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "achilles.labels" -}}
{{ include "achilles.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: achilles
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "achilles.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "achilles.operatorServiceAccount" -}}
{{- default (printf "%s-operator" (include "achilles.fullname" .)) .Values.operator.serviceAccount.name -}}
{{- end -}}

{{/* The migrations' database Secret: its own, or the operator's when none is given. */}}
{{- define "achilles.migrationsSecretName" -}}
{{- default .Values.database.operator.secretName .Values.database.migrations.secretName -}}
{{- end -}}

{{- define "achilles.migrationsSecretKey" -}}
{{- if .Values.database.migrations.secretName -}}
{{- .Values.database.migrations.key -}}
{{- else -}}
{{- .Values.database.operator.key -}}
{{- end -}}
{{- end -}}

{{/* Pod Security Standards "restricted": non-root, no privilege escalation, no capabilities.
     uid 10001 is the image's own user (Dockerfile). */}}
{{- define "achilles.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "achilles.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}
