{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "ncclwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Base of every object name: fullnameOverride, else the release name when it already contains the
chart name ("ncclwatch" gives ncclwatch-agent, as in deploy/k8s), else "<release>-<chart>".
Truncated so that the longest suffix ("-aggregator-data") still fits in 63 characters.
*/}}
{{- define "ncclwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 47 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 47 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 47 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ncclwatch.agent.fullname" -}}
{{- printf "%s-agent" (include "ncclwatch.fullname" .) -}}
{{- end -}}

{{- define "ncclwatch.aggregator.fullname" -}}
{{- printf "%s-aggregator" (include "ncclwatch.fullname" .) -}}
{{- end -}}

{{/* Labels every object carries (the standard app.kubernetes.io set plus commonLabels). */}}
{{- define "ncclwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ncclwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ncclwatch
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ncclwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ncclwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Per component: call with (dict "ctx" $ "component" "agent"). */}}
{{- define "ncclwatch.componentLabels" -}}
{{ include "ncclwatch.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "ncclwatch.componentSelectorLabels" -}}
{{ include "ncclwatch.selectorLabels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* "repository:tag" of a component's image; call with (dict "ctx" $ "image" .Values.agent.image). */}}
{{- define "ncclwatch.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* The aggregator Service's in-cluster DNS name, which the agents dial and verify. */}}
{{- define "ncclwatch.aggregator.host" -}}
{{- printf "%s.%s.svc" (include "ncclwatch.aggregator.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* Whether the cluster serves the Prometheus Operator's API (ServiceMonitor, PrometheusRule). */}}
{{- define "ncclwatch.hasServiceMonitor" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end -}}
{{- end -}}

{{- define "ncclwatch.hasPrometheusRule" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule" }}true{{ end -}}
{{- end -}}

{{/* The Secret holding the ingest token: the one named in tls.tokenSecret, else the one the chart
generates, else "" (insecure.ingest). */}}
{{- define "ncclwatch.ingestTokenSecret" -}}
{{- if .Values.tls.tokenSecret -}}
{{- .Values.tls.tokenSecret -}}
{{- else if not .Values.insecure.ingest -}}
{{- printf "%s-ingest-token" (include "ncclwatch.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The same for the query token (tls.queryTokenSecret, insecure.query). */}}
{{- define "ncclwatch.queryTokenSecret" -}}
{{- if .Values.tls.queryTokenSecret -}}
{{- .Values.tls.queryTokenSecret -}}
{{- else if not .Values.insecure.query -}}
{{- printf "%s-query-token" (include "ncclwatch.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
The relabeling that adds the `cluster` label (value `cluster`) to every scraped series, as NCCL
Inspector's dashboard expects; nothing when the value is empty. With honorLabels, a `cluster`
label an exporter sets itself wins (ncclwatch's do not set one).
*/}}
{{- define "ncclwatch.clusterRelabeling" -}}
{{- with .Values.cluster -}}
- targetLabel: cluster
  replacement: {{ . | quote }}
{{- end }}
{{- end -}}
