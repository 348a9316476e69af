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

{{- define "achilles.apiServiceAccount" -}}
{{- default (printf "%s-api" (include "achilles.fullname" .)) .Values.api.serviceAccount.name -}}
{{- end -}}

{{/* The API's database Secret: a login of its own (a member of achilles_api). */}}
{{- define "achilles.apiSecretName" -}}
{{- .Values.database.api.secretName -}}
{{- end -}}

{{- define "achilles.apiSecretKey" -}}
{{- .Values.database.api.key -}}
{{- end -}}

{{/* Settings of the API that only make sense together: one clear failure each. */}}
{{- define "achilles.apiChecks" -}}
{{- $api := .Values.api -}}
{{- if ne (empty $api.oidc.issuer) (empty $api.oidc.audience) -}}
{{- fail "api.oidc.issuer and api.oidc.audience must be set together (the audience a token must carry is part of trusting an issuer)" -}}
{{- end -}}
{{- if $api.web.enabled -}}
{{- range $name, $value := dict "api.oidc.issuer" $api.oidc.issuer "api.web.publicURL" $api.web.publicURL "api.web.clientId" $api.web.clientId "api.web.clientSecret.secretName" $api.web.clientSecret.secretName "api.web.sessionSecret.secretName" $api.web.sessionSecret.secretName -}}
{{- if empty $value -}}
{{- fail (printf "api.web.enabled needs %s (see the chart README, section API)" $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $api.ingress.enabled (empty $api.ingress.host) -}}
{{- fail "api.ingress.enabled needs api.ingress.host" -}}
{{- end -}}
{{- if and $api.service.nodePort (eq $api.service.type "ClusterIP") -}}
{{- fail "api.service.nodePort needs api.service.type NodePort or LoadBalancer" -}}
{{- end -}}
{{- end -}}

{{/* The migrations' database Secret: the schema owner's login (DDL, CREATEROLE), which
     no other component may use (their logins may not run DDL). */}}
{{- define "achilles.migrationsSecretName" -}}
{{- .Values.database.migrations.secretName -}}
{{- end -}}

{{- define "achilles.migrationsSecretKey" -}}
{{- .Values.database.migrations.key -}}
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
