{{- define "pgvs3-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pgvs3-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pgvs3-operator.labels" -}}
{{ include "pgvs3-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "pgvs3-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pgvs3-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The namespaces the operator watches, as a JSON list: `watchNamespaces` and `watchNamespace`
together, without repeats; empty for every namespace.
*/}}
{{- define "pgvs3-operator.watchNamespaces" -}}
{{- $all := .Values.watchNamespaces | default list -}}
{{- if .Values.watchNamespace -}}
{{- $all = append $all .Values.watchNamespace -}}
{{- end -}}
{{- $all | uniq | toJson -}}
{{- end -}}
