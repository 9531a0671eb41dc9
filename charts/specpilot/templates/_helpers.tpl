{{- define "specpilot.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "specpilot.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specpilot
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "specpilot.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "specpilot.leaseName" -}}
{{- default (printf "%s-leader" (include "specpilot.fullname" .) | trunc 63 | trimSuffix "-") .Values.leaderElection.leaseName -}}
{{- end -}}

{{- define "specpilot.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "specpilot.fullname" .) .Values.serviceAccount.name }}{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{/* The rules the operator needs; shared by the ClusterRole and the per-namespace Roles. */}}
{{- define "specpilot.rules" -}}
- apiGroups: ["specpilot.dev"]
  resources: ["speculativedeployments"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["specpilot.dev"]
  resources: ["speculativedeployments/status"]
  verbs: ["get", "patch", "update"]
# Children carry ownerReferences with blockOwnerDeletion: true; with the OwnerReferencesPermissionEnforcement
# admission plugin that needs update on the owner's finalizers subresource.
- apiGroups: ["specpilot.dev"]
  resources: ["speculativedeployments/finalizers"]
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]  # delete: the canary Deployment when switched off
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["monitoring.coreos.com"]
  resources: ["podmonitors"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end -}}
