{{/* The scrape endpoint both monitors share: .v is serviceMonitor or podMonitor. */}}
{{- define "hcclwatch.scrapeEndpoint" -}}
{{- $v := .v -}}
{{- $root := .root -}}
- port: metrics
  path: /metrics
  interval: {{ $v.interval }}
  scrapeTimeout: {{ $v.scrapeTimeout }}
  honorLabels: {{ $v.honorLabels }}
  {{- if $root.Values.tlsServerConfig.enabled }}
  scheme: https
  tlsConfig:
    {{- if $v.tlsConfig }}
    {{- toYaml $v.tlsConfig | nindent 4 }}
    {{- else }}
    ca:
      secret:
        name: {{ include "hcclwatch.tlsSecret" $root }}
        key: {{ $root.Values.tlsServerConfig.caFilename }}
    serverName: {{ printf "%s.%s.svc" (include "hcclwatch.fullname" $root) $root.Release.Namespace }}
    {{- end }}
  {{- end }}
  {{- with $v.basicAuth }}
  basicAuth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.relabelings }}
  relabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* Whether a Prometheus Operator kind is served: "true" or "". */}}
{{- define "hcclwatch.hasCRD" -}}
{{- if .root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind) -}}true{{- end -}}
{{- end -}}
