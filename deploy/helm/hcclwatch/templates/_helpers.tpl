{{/* Names, labels and the derived settings every template shares. */}}

{{- define "hcclwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The object name prefix: the release name when it already says hcclwatch. At most 53
characters, so that the receiver's Service ("<prefix>-remediate") is still a DNS label. */}}
{{- define "hcclwatch.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 53 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 53 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hcclwatch.remediateName" -}}
{{- printf "%s-remediate" (include "hcclwatch.fullname" .) -}}
{{- end -}}

{{- define "hcclwatch.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hcclwatch
{{- end -}}

{{/* The daemon's selector labels (also the Service's and the monitors' selector). */}}
{{- define "hcclwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hcclwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hcclwatch.labels" -}}
{{ include "hcclwatch.selectorLabels" . }}
{{ include "hcclwatch.commonLabels" . }}
{{- end -}}

{{- define "hcclwatch.remediateSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-remediate" (include "hcclwatch.name" .) }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hcclwatch.remediateLabels" -}}
{{ include "hcclwatch.remediateSelectorLabels" . }}
{{ include "hcclwatch.commonLabels" . }}
app.kubernetes.io/component: remediation
{{- end -}}

{{- define "hcclwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "hcclwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hcclwatch.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "hcclwatch.probeKeySecret" -}}
{{- default (printf "%s-probe-key" (include "hcclwatch.fullname" .)) .Values.probeKey.existingSecret -}}
{{- end -}}

{{- define "hcclwatch.tlsSecret" -}}
{{- default (printf "%s-tls" (include "hcclwatch.fullname" .)) .Values.tlsServerConfig.existingSecret -}}
{{- end -}}

{{- define "hcclwatch.faultLevelsConfigMap" -}}
{{- default (printf "%s-fault-levels" (include "hcclwatch.fullname" .)) .Values.faultLevels.existingConfigMap -}}
{{- end -}}

{{- define "hcclwatch.remediateTokenSecret" -}}
{{- default (printf "%s-token" (include "hcclwatch.remediateName" .)) .Values.remediation.token.existingSecret -}}
{{- end -}}

{{/* "true" when the daemons push hard faults to the chart's receiver. */}}
{{- define "hcclwatch.push" -}}
{{- if and .Values.remediation.enabled .Values.remediation.push.enabled -}}true{{- end -}}
{{- end -}}

{{/* "true" when the daemon serves a web config (TLS or basic auth). */}}
{{- define "hcclwatch.webConfig" -}}
{{- if or .Values.tlsServerConfig.enabled .Values.basicAuth.users -}}true{{- end -}}
{{- end -}}

{{/* "true" when the kubelet cannot complete a TLS handshake (a client certificate is
required), so the probes use TCP. */}}
{{- define "hcclwatch.tcpProbes" -}}
{{- if and .Values.tlsServerConfig.enabled (has .Values.tlsServerConfig.clientAuthType (list "RequireAnyClientCert" "RequireAndVerifyClientCert")) -}}true{{- end -}}
{{- end -}}

{{/* A value of config, by section and key, or "" when unset. */}}
{{- define "hcclwatch.configValue" -}}
{{- $section := index .root.Values.config .section | default dict -}}
{{- if hasKey $section .key -}}{{- index $section .key -}}{{- end -}}
{{- end -}}

{{/* "true" while pod attribution runs (it needs the host PID namespace, the kubelet
pod-resources directory and, for the API source, the pod-reader RBAC). */}}
{{- define "hcclwatch.attribution" -}}
{{- if and .Values.ascend.enabled (ne (include "hcclwatch.configValue" (dict "root" . "section" "attribution" "key" "enabled")) "false") -}}true{{- end -}}
{{- end -}}

{{- define "hcclwatch.attributionApi" -}}
{{- if and (include "hcclwatch.attribution" .) (ne (include "hcclwatch.configValue" (dict "root" . "section" "attribution" "key" "kubernetes_api")) "false") -}}true{{- end -}}
{{- end -}}

{{/* "true" while the topology source reads the Kubernetes API (node labels or Volcano
HyperNodes; docs/topology.md), which needs the topology-reader RBAC and the token. */}}
{{- define "hcclwatch.topologyApi" -}}
{{- $on := ne (include "hcclwatch.configValue" (dict "root" . "section" "topology" "key" "enabled")) "false" -}}
{{- $labels := ne (include "hcclwatch.configValue" (dict "root" . "section" "topology" "key" "node_labels")) "false" -}}
{{- $hn := ne (include "hcclwatch.configValue" (dict "root" . "section" "topology" "key" "hypernodes")) "false" -}}
{{- if and $on (or $labels $hn) -}}true{{- end -}}
{{- end -}}

{{/* The daemon's configuration: the chart's derived keys, then .Values.config over them. */}}
{{- define "hcclwatch.config" -}}
{{- $c := dict -}}
{{- $web := dict "listen_address" (printf ":%v" .Values.service.port) -}}
{{- if include "hcclwatch.webConfig" . -}}
{{- $_ := set $web "config_file" "/etc/hcclwatch/web/web-config.yml" -}}
{{- end -}}
{{- if .Values.kubernetes.enablePodLabels -}}
{{- $_ := set $web "pod_labels" true -}}
{{- end -}}
{{- $_ := set $c "web" $web -}}
{{- /* DCMI when the node has Ascend NPUs (host metrics only on the others); without
the driver mounts there is nothing to load. */ -}}
{{- $telemetry := dict "backend" (ternary "auto" "none" .Values.ascend.enabled) -}}
{{- if .Values.faultLevels.enabled -}}
{{- $_ := set $telemetry "fault_levels_file" (printf "/etc/hcclwatch/fault-levels/%s" .Values.faultLevels.key) -}}
{{- end -}}
{{- $_ := set $c "telemetry" $telemetry -}}
{{- if .Values.compat.npuExporter -}}
{{- $_ := set $c "compat" (dict "npu_exporter" true) -}}
{{- end -}}
{{- $peers := printf "%s.%s.svc.%s:%v" (include "hcclwatch.fullname" .) .Release.Namespace .Values.clusterDomain .Values.service.probePort -}}
{{- $_ := set $c "collective" (dict "peers_dns" $peers "key_file" (printf "/etc/hcclwatch/key/%s" .Values.probeKey.secretKey)) -}}
{{- if include "hcclwatch.push" . -}}
{{- $url := printf "http://%s.%s.svc.%s:%v" (include "hcclwatch.remediateName" .) .Release.Namespace .Values.clusterDomain .Values.remediation.service.port -}}
{{- $token := printf "/etc/hcclwatch/remediate-token/%s" .Values.remediation.token.secretKey -}}
{{- $_ := set $c "remediation" (dict "push" (dict "enabled" true "url" $url "bearer_token_file" $token)) -}}
{{- end -}}
{{- $merged := mustMergeOverwrite $c (deepCopy .Values.config) -}}
{{- include "hcclwatch.toml" $merged -}}
{{- end -}}

{{/* The receiver's configuration: the chart's paths, then .Values.remediation.config. */}}
{{- define "hcclwatch.remediateConfig" -}}
{{- $c := dict
  "listen_address" (printf ":%v" .Values.remediation.service.port)
  "audit_log" "/var/lib/hcclwatch/audit.jsonl"
  "killswitch_file" "/var/lib/hcclwatch/pause"
  "auth" (dict "bearer_token_file" (printf "/etc/hcclwatch-remediate/token/%s" .Values.remediation.token.secretKey)) -}}
{{- $merged := mustMergeOverwrite $c (deepCopy .Values.remediation.config) -}}
{{- include "hcclwatch.toml" $merged -}}
{{- end -}}

{{/* A random secret value, kept across upgrades: the value already in the cluster's
Secret when there is one (lookup answers nothing under `helm template`). */}}
{{- define "hcclwatch.keptRandom" -}}
{{- $existing := lookup "v1" "Secret" .namespace .name -}}
{{- if and $existing $existing.data (hasKey $existing.data .key) -}}
{{- index $existing.data .key -}}
{{- else -}}
{{- randAlphaNum 48 | b64enc -}}
{{- end -}}
{{- end -}}
