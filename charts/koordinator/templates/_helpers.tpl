{{/* Image reference: <imageRepositoryHost>/<repository>:<tag>. */}}
{{- define "koordinator.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- if $root.Values.imageRepositoryHost -}}
{{ $root.Values.imageRepositoryHost }}/{{ $image.repository }}:{{ $image.tag }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag }}
{{- end -}}
{{- end -}}

{{/* Labels every object of the chart carries. */}}
{{- define "koordinator.labels" -}}
app.kubernetes.io/part-of: koordinator
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{/* koordlet feature gates: the explicit value, else the qos switches and the hook switches. */}}
{{- define "koordinator.koordletFeatureGates" -}}
{{- $netqos := and .Values.koordlet.networkQos .Values.koordlet.networkQos.enabled -}}
{{- if .Values.koordlet.features -}}
{{ .Values.koordlet.features }}
{{- if and $netqos (not (contains "TCNetworkQoS" .Values.koordlet.features)) -}},TCNetworkQoS=true{{- end -}}
{{- if and .Values.koordlet.runtimeHooks.gpuEnvInject (not (contains "GPUEnvInject" .Values.koordlet.features)) -}},GPUEnvInject=true{{- end -}}
{{- else -}}
{{- $q := .Values.koordlet.qos -}}
BECPUSuppress={{ $q.cpuSuppress }},CPUBurst={{ $q.cpuBurst }},CgroupReconcile={{ $q.cgroupReconcile }},BECPUEvict={{ $q.cpuEvict }},BEMemoryEvict={{ $q.memoryEvict }},BlkIOReconcile={{ $q.blkioReconcile }},SystemConfig={{ $q.systemConfig }},RdtResctrl={{ $q.resctrl }}
{{- if $netqos -}},TCNetworkQoS=true{{- end -}}
{{- if .Values.koordlet.runtimeHooks.gpuEnvInject -}},GPUEnvInject=true{{- end -}}
{{- end -}}
{{- end -}}

{{/* The webhook client config: the Service, with cert-manager's CA injection or a placeholder bundle koord-manager replaces. */}}
{{- define "koordinator.webhookClient" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
clientConfig:
  service:
    name: koordinator-webhook-service
    namespace: {{ $root.Values.installation.namespace }}
    path: {{ $path }}
{{- /* No caBundle: koord-manager (or cert-manager) writes it. A placeholder here would make
       Helm own the field, and Helm 4's server-side apply then refuses every upgrade once the
       manager has written the real bundle. */}}
{{- end -}}

{{/* Webhooks never act on kube-system or on our own namespace. */}}
{{- define "koordinator.webhookNamespaceSelector" -}}
namespaceSelector:
  matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
    - kube-system
    - {{ .Values.installation.namespace }}
  - key: control-plane
    operator: DoesNotExist
{{- end -}}
