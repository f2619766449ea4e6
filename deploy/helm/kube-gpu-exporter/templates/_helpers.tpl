{{/*
Names, labels and the choices several templates share. Written by hand; what the bundle config
decides is in _generated.tpl (`make bundle`). What a helper returns is text: the template that
places it in YAML quotes it (`| quote`), so that no value can add a key where it lands.
*/}}

{{- define "kube-gpu-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release name, followed by the chart's unless it holds it. */}}
{{- define "kube-gpu-exporter.fullname" -}}
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

{{/* The namespace of every namespaced object: namespaceOverride, else the release's. */}}
{{- define "kube-gpu-exporter.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace }}
{{- end }}

{{- define "kube-gpu-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kube-gpu-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-gpu-exporter.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{- define "kube-gpu-exporter.labels" -}}
helm.sh/chart: {{ include "kube-gpu-exporter.chart" . | quote }}
{{ include "kube-gpu-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
{{- end }}

{{- define "kube-gpu-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kube-gpu-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: repository@digest with a digest, which the kubelet pulls whatever a tag says; else repository:tag. */}}
{{- define "kube-gpu-exporter.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The dcgm-exporter profile the exporter runs: compat.dcgmExporter, else its default. */}}
{{- define "kube-gpu-exporter.dcgmVersion" -}}
{{- .Values.compat.dcgmExporter | default (include "kube-gpu-exporter.bundle.defaultDcgmVersion" .) }}
{{- end }}

{{/*
A file of the flavour made for the profile the exporter runs, or a failure that says which
flavours the chart carries. Called with (list $ "rules"|"dashboards").
*/}}
{{- define "kube-gpu-exporter.flavourFiles" -}}
{{- $root := index . 0 }}
{{- $what := index . 1 }}
{{- $version := include "kube-gpu-exporter.dcgmVersion" $root }}
{{- /* A profile that serves the scrape of a carried flavour (4.8.4, 4.8.3's) takes that flavour. */}}
{{- $flavour := get (include "kube-gpu-exporter.bundle.flavourOf" $root | fromYaml) $version | toString }}
{{- $glob := printf "files/dashboards/dcgm-%s/*.json" $flavour }}
{{- if eq $what "rules" }}
{{- $glob = printf "files/prometheus-rules/dcgm-%s.yaml" $flavour }}
{{- end }}
{{- /* The flavour goes into a glob: one the chart does not carry (`*`, say) matches nothing. */}}
{{- $carried := include "kube-gpu-exporter.bundle.flavours" $root | splitList ", " }}
{{- $found := dict }}
{{- if has $flavour $carried }}
{{- $found = $root.Files.Glob $glob }}
{{- end }}
{{- if not $found }}
{{- fail (printf "%s: this chart carries the bundle's %s for dcgm-exporter %s only, not for compat.dcgmExporter=%s. Turn %s off, or generate a bundle for that profile (docs/helm.md, 'Rules and dashboards')" (eq $what "rules" | ternary "prometheusRule.enabled" "dashboards.enabled") $what (include "kube-gpu-exporter.bundle.flavours" $root) $version (eq $what "rules" | ternary "prometheusRule" "dashboards")) }}
{{- end }}
{{- $paths := list }}
{{- range $path, $_ := $found }}
{{- $paths = append $paths $path }}
{{- end }}
{{- $paths | sortAlpha | toJson }}
{{- end }}

{{/* The Secret that holds --web.config.file. */}}
{{- define "kube-gpu-exporter.webConfigSecret" -}}
{{- .Values.webConfig.existingSecret | default (printf "%s-web-config" (include "kube-gpu-exporter.fullname" .)) }}
{{- end }}

{{/* The ConfigMap the chart makes of collectors.csv. */}}
{{- define "kube-gpu-exporter.collectorsConfigMap" -}}
{{- printf "%s-collectors" (include "kube-gpu-exporter.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Where the exporter reads the collectors CSV: --collectors. */}}
{{- define "kube-gpu-exporter.collectorsFile" -}}
{{- printf "%s/%s" (include "kube-gpu-exporter.bundle.collectorsDir" .) (include "kube-gpu-exporter.bundle.collectorsFileName" .) }}
{{- end }}

{{/* The Secret of the certificate webConfig.selfSignedCert generates. */}}
{{- define "kube-gpu-exporter.selfSignedSecret" -}}
{{- printf "%s-tls" (include "kube-gpu-exporter.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The name the generated certificate is for, and the monitors check: the Service's. */}}
{{- define "kube-gpu-exporter.serverName" -}}
{{- printf "%s.%s.svc" (include "kube-gpu-exporter.fullname" .) (include "kube-gpu-exporter.namespace" .) }}
{{- end }}

{{/*
The web config file the chart makes from webConfig.config, as YAML; with selfSignedCert it names
the generated certificate and key, which lie beside it (the projected volume).
*/}}
{{- define "kube-gpu-exporter.webConfigFile" -}}
{{- $web := .Values.webConfig }}
{{- $file := deepCopy $web.config }}
{{- if $web.selfSignedCert.enabled }}
{{- $tls := deepCopy (get $file "tls_server_config" | default dict) }}
{{- $_ := set $tls "cert_file" "tls.crt" }}
{{- $_ = set $tls "key_file" "tls.key" }}
{{- $_ = set $file "tls_server_config" $tls }}
{{- end }}
{{- toYaml $file }}
{{- end }}

{{/* The scheme Prometheus and the probes talk to the exporter with. */}}
{{- define "kube-gpu-exporter.scheme" -}}
{{- if and .Values.webConfig.enabled .Values.webConfig.tls }}https{{ else }}http{{ end }}
{{- end }}

{{/*
A probe of the values, fitted to the web config: HTTPS with TLS; the Authorization header with
basic auth; a TCP check where the kubelet cannot pass (basic auth without a header, or client
certificates required). Called with (list $ .Values.livenessProbe).
*/}}
{{- define "kube-gpu-exporter.probe" -}}
{{- $root := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- $web := $root.Values.webConfig }}
{{- if and $web.enabled $probe.httpGet }}
{{- if or $web.clientCertificates (and $web.basicAuth (not $web.probeAuthorization)) }}
{{- $_ := set $probe "tcpSocket" (dict "port" $probe.httpGet.port) }}
{{- $_ = unset $probe "httpGet" }}
{{- else }}
{{- if $web.tls }}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- if and $web.basicAuth $web.probeAuthorization }}
{{- $_ := set $probe.httpGet "httpHeaders" (list (dict "name" "Authorization" "value" $web.probeAuthorization)) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* One scrape endpoint of the ServiceMonitor or the PodMonitor. Called with (list $ .Values.serviceMonitor). */}}
{{- define "kube-gpu-exporter.endpoint" -}}
{{- $root := index . 0 }}
{{- $monitor := index . 1 }}
port: {{ include "kube-gpu-exporter.bundle.portName" $root | quote }}
path: /metrics
{{- if eq (include "kube-gpu-exporter.scheme" $root) "https" }}
scheme: https
{{- end }}
interval: {{ $monitor.interval | quote }}
scrapeTimeout: {{ $monitor.scrapeTimeout | quote }}
honorLabels: {{ $monitor.honorLabels | toJson }}
{{- $tlsConfig := $monitor.tlsConfig }}
{{- $web := $root.Values.webConfig }}
{{- if and (not $tlsConfig) $web.enabled $web.selfSignedCert.enabled }}
{{- /* The generated certificate, from its Secret, for the name it is made for. */}}
{{- $ca := dict "secret" (dict "name" (include "kube-gpu-exporter.selfSignedSecret" $root) "key" "ca.crt") }}
{{- $tlsConfig = dict "ca" $ca "serverName" (include "kube-gpu-exporter.serverName" $root) }}
{{- end }}
{{- with $tlsConfig }}
tlsConfig:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $monitor.basicAuth }}
basicAuth:
  {{- toYaml . | nindent 2 }}
{{- end }}
relabelings:
{{- include "kube-gpu-exporter.bundle.relabelings" $root | nindent 0 }}
{{- with $monitor.relabelings }}
{{- toYaml . | nindent 0 }}
{{- end }}
{{- with $monitor.metricRelabelings }}
metricRelabelings:
{{- toYaml . | nindent 0 }}
{{- end }}
{{- end }}
