{{/* Full name: the release name, or <release>-meshfed. */}}
{{- define "meshfed.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "meshfed.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "meshfed.labels" -}}
{{ include "meshfed.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "meshfed.serviceAccountName" -}}
{{- default (include "meshfed.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "meshfed.secretNamespace" -}}
{{- default .Release.Namespace .Values.config.kubernetes.secretDiscovery.namespace -}}
{{- end -}}

{{- define "meshfed.credentialsSecret" -}}
{{- default (printf "%s-credentials" (include "meshfed.fullname" .)) .Values.existingCredentialsSecret -}}
{{- end -}}

{{/* clusters.yaml, built from .Values.config. */}}
{{- define "meshfed.clustersYAML" -}}
{{- $c := .Values.config -}}
xds:
  address: 0.0.0.0:{{ .Values.ports.xds }}
admin:
  address: 0.0.0.0:{{ .Values.ports.admin }}
{{- if .Values.admin.tokenSecret }}
  tokenFile: /etc/meshfed/admin/token
{{- end }}
syncTimeout: {{ $c.syncTimeoutSeconds }}s
debounce:{{ toYaml $c.debounce | nindent 2 }}
{{- if .Values.state.enabled }}
state:
  dir: /var/lib/meshfed/state
  maxAge: {{ .Values.state.maxAge }}
{{- end }}
registries:
{{- if $c.kubernetes.enabled }}
  - name: {{ $c.kubernetes.name }}
    kind: kubernetes
    domain: {{ $c.kubernetes.domain }}
    {{- $k := dict }}
    {{- with $c.kubernetes.network }}{{ $_ := set $k "network" . }}{{ end }}
    {{- with $c.kubernetes.namespaces }}{{ $_ := set $k "namespaces" . }}{{ end }}
    {{- if $c.kubernetes.secretDiscovery.enabled }}{{ $_ := set $k "secretDiscovery" (dict "namespace" (include "meshfed.secretNamespace" .)) }}{{ end }}
    kubernetes:{{ toYaml $k | nindent 6 }}
{{- end }}
{{- with $c.registries }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- if or (and $c.kubernetes.enabled $c.kubernetes.istioConfig) $c.configSources }}
configSources:
{{- if and $c.kubernetes.enabled $c.kubernetes.istioConfig }}
  - name: {{ $c.kubernetes.name }}-istio
    {{- $k := dict "clusters" (list $c.kubernetes.name) }}
    {{- with $c.kubernetes.namespaces }}{{ $_ := set $k "namespaces" . }}{{ end }}
    kubernetes:{{ toYaml $k | nindent 6 }}
{{- end }}
{{- with $c.configSources }}
{{ toYaml . | indent 2 }}
{{- end }}
{{- end }}
{{- end -}}
