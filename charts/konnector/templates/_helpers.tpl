{{/* Chart name, overridable. */}}
{{- define "konnector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: release name, plus the chart name unless it already contains it. */}}
{{- define "konnector.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "konnector.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the konnector Pods; never change them on upgrade. */}}
{{- define "konnector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "konnector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "konnector.labels" -}}
helm.sh/chart: {{ include "konnector.chart" . }}
{{ include "konnector.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: konnector
app.kubernetes.io/part-of: kbind
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The image reference; the tag placeholder defaults to the chart's appVersion. */}}
{{- define "konnector.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
Leader election is on when asked for, and forced on with more than one replica: only one
konnector may actively reconcile a consumer. Sharding replaces it: never with sharding on.
Renders "true" or "".
*/}}
{{- define "konnector.leaderElect" -}}
{{- if and (not .Values.sharding.enabled) (or .Values.leaderElect (gt (int .Values.replicaCount) 1)) }}true{{ end }}
{{- end }}

{{/* Whether the konnector holds consumer Leases: to elect a leader or to shard. Renders "true" or "". */}}
{{- define "konnector.leases" -}}
{{- if or (include "konnector.leaderElect" .) .Values.sharding.enabled }}true{{ end }}
{{- end }}

{{/* The policy roles, each with its --<role>-policy flag. */}}
{{- define "konnector.policyRoles" -}}
{{- list "schema" "conflict" "related" "placement" | toJson }}
{{- end }}
