{{/*
A TOML writer for the daemon's and the receiver's configurations, which the chart takes as
YAML. Helm's own toToml cannot be used: values read from YAML files are float64, which it
writes as 3.0, and the daemon's integer keys refuse a float. Here a number without a
fractional part is written as an integer (the daemon's float keys accept integers too).

  include "hcclwatch.toml" $map

Scalars and arrays of scalars of a table come first, then its sub-tables ([a.b]), then its
arrays of tables ([[a.rules]]). A null value is left out, so `key: null` in the values
drops a key the chart would set. Keys that are not bare TOML keys are quoted.
*/}}
{{- define "hcclwatch.toml" -}}
{{- include "hcclwatch.toml.table" (dict "m" . "path" list "array" false) -}}
{{- end -}}

{{- define "hcclwatch.toml.table" -}}
{{- $m := .m -}}
{{- $path := .path -}}
{{- if $path }}

{{ if .array }}[[{{ include "hcclwatch.toml.path" $path }}]]{{ else }}[{{ include "hcclwatch.toml.path" $path }}]{{ end }}
{{- end -}}
{{- range $k := keys $m | sortAlpha -}}
{{- $v := index $m $k -}}
{{- if not (or (kindIs "invalid" $v) (kindIs "map" $v) (include "hcclwatch.toml.isTableArray" $v)) }}
{{ include "hcclwatch.toml.key" $k }} = {{ include "hcclwatch.toml.value" $v }}
{{- end -}}
{{- end -}}
{{- range $k := keys $m | sortAlpha -}}
{{- $v := index $m $k -}}
{{- if kindIs "map" $v -}}
{{- include "hcclwatch.toml.table" (dict "m" $v "path" (append $path $k) "array" false) -}}
{{- end -}}
{{- end -}}
{{- range $k := keys $m | sortAlpha -}}
{{- $v := index $m $k -}}
{{- if include "hcclwatch.toml.isTableArray" $v -}}
{{- range $item := $v -}}
{{- include "hcclwatch.toml.table" (dict "m" $item "path" (append $path $k) "array" true) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" for a non-empty list of maps (an array of tables). */}}
{{- define "hcclwatch.toml.isTableArray" -}}
{{- if and (kindIs "slice" .) (gt (len .) 0) -}}
{{- if kindIs "map" (first .) -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hcclwatch.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "hcclwatch.toml.path" -}}
{{- $parts := list -}}
{{- range . -}}{{- $parts = append $parts (include "hcclwatch.toml.key" .) -}}{{- end -}}
{{- join "." $parts -}}
{{- end -}}

{{- define "hcclwatch.toml.value" -}}
{{- if kindIs "string" . -}}
{{- toJson . -}}
{{- else if kindIs "bool" . -}}
{{- . -}}
{{- else if kindIs "float64" . -}}
{{- if eq . (floor .) -}}{{- int64 . -}}{{- else -}}{{- . -}}{{- end -}}
{{- else if or (kindIs "int" .) (kindIs "int64" .) -}}
{{- . -}}
{{- else if kindIs "slice" . -}}
{{- $items := list -}}
{{- range . -}}{{- $items = append $items (include "hcclwatch.toml.value" .) -}}{{- end -}}
[{{ join ", " $items }}]
{{- else -}}
{{- fail (printf "hcclwatch: cannot write %v (%s) as a TOML value" . (kindOf .)) -}}
{{- end -}}
{{- end -}}
