{{/*
Shared names, labels and checks. Object names are fixed (see values.yaml):
the agents reach the controller through the Service novaedge-controller, and
the controller creates the mTLS Secrets under fixed names.
*/}}

{{/* novaedge.chart is the helm.sh/chart label value. */}}
{{- define "novaedge.chart" -}}
{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* novaedge.labels are the labels of every object; pass a dict with "root" and "component". */}}
{{- define "novaedge.labels" -}}
helm.sh/chart: {{ include "novaedge.chart" .root }}
{{ include "novaedge.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: novaedge
{{- end }}

{{/* novaedge.selectorLabels select one component's pods; they never change between releases. */}}
{{- define "novaedge.selectorLabels" -}}
app.kubernetes.io/name: novaedge
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* novaedge.image is the image reference; the tag defaults to the chart's appVersion. */}}
{{- define "novaedge.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* novaedge.controllerAddress is the host:port the agents dial; its host is a DNS name of the controller's certificate. */}}
{{- define "novaedge.controllerAddress" -}}
novaedge-controller.{{ .Release.Namespace }}.svc:9443
{{- end }}

{{/*
novaedge.validate fails the render on combinations values.schema.json
cannot express, naming the values and the problem.
*/}}
{{- define "novaedge.validate" -}}
{{- $ports := splitList "-" .Values.agent.natPortRange }}
{{- $lo := index $ports 0 | atoi }}
{{- $hi := index $ports 1 | atoi }}
{{- if or (lt $lo 1) (gt $hi 65535) (gt $lo $hi) }}
{{- fail (printf "agent.natPortRange %q: want LOW-HIGH with 1 <= LOW <= HIGH <= 65535" .Values.agent.natPortRange) }}
{{- end }}
{{- if and (not .Values.controller.leaderElect) (gt (int .Values.controller.replicas) 1) }}
{{- fail (printf "controller.leaderElect=false with controller.replicas=%d: replicas would all act as the leader and fight over addresses and status; set controller.replicas=1 or turn leader election on" (int .Values.controller.replicas)) }}
{{- end }}
{{- if and .Values.tls.create (ne .Values.tls.agentSecretName "novaedge-agent-tls") }}
{{- fail (printf "tls.agentSecretName %q with tls.create=true: the controller creates the agents' certificate as novaedge-agent-tls; set tls.create=false to provide %q yourself" .Values.tls.agentSecretName .Values.tls.agentSecretName) }}
{{- end }}
{{- end }}
