{{- define "limitbed.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "limitbed.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "limitbed.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "limitbed.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "limitbed.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "limitbed.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "limitbed.selectorLabels" -}}
app.kubernetes.io/name: {{ include "limitbed.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* <gpuHookPath>/vgpu: the node directory the plugin, the monitor and the installer share. */}}
{{- define "limitbed.vgpuDir" -}}
{{- printf "%s/vgpu" (trimSuffix "/" .Values.global.gpuHookPath) -}}
{{- end -}}

{{- define "limitbed.fakeDir" -}}
{{- printf "%s/fakegpu" (include "limitbed.vgpuDir" .) -}}
{{- end -}}

{{/* The global device configuration (HAMi's device-config.yaml); only fields the plugin accepts. */}}
{{- define "limitbed.deviceConfig" -}}
version: v1
nvidia:
  resourceCountName: {{ .Values.devicePlugin.resourceName | quote }}
  limitDelivery: {{ .Values.devicePlugin.limitDelivery | quote }}
  allowPodLimitDeliveryOverride: {{ .Values.devicePlugin.allowPodLimitDeliveryOverride }}
  disableCoreLimit: {{ .Values.devicePlugin.disableCoreLimit }}
  deviceSplitCount: {{ .Values.devicePlugin.deviceSplitCount }}
  deviceMemoryScaling: {{ .Values.devicePlugin.deviceMemoryScaling }}
  deviceCoreScaling: {{ .Values.devicePlugin.deviceCoreScaling }}
  {{- with .Values.devicePlugin.libCudaLogLevel }}
  libCudaLogLevel: {{ . | quote }}
  {{- end }}
  enforcement: {{ .Values.monitor.enforcement | quote }}
{{- end -}}

{{- define "limitbed.nodeConfig" -}}
{{- dict "version" "v1" "nodeconfig" .Values.nodeConfig | toPrettyJson -}}
{{- end -}}
