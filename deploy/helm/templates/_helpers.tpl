{{/* Chart name, overridable. */}}
{{- define "bigfleet-proxmox.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Release-scoped name. A release whose name already contains the chart name
(e.g. bigfleet-proxmox-dc1) is used as is, so resources are not named twice.
*/}}
{{- define "bigfleet-proxmox.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "bigfleet-proxmox.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: must never change between upgrades. */}}
{{- define "bigfleet-proxmox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "bigfleet-proxmox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bigfleet-proxmox.labels" -}}
helm.sh/chart: {{ include "bigfleet-proxmox.chart" . }}
{{ include "bigfleet-proxmox.selectorLabels" . }}
app.kubernetes.io/version: {{ (default .Chart.AppVersion .Values.image.tag) | toString | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: capacity-provider
{{- end -}}

{{- define "bigfleet-proxmox.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "bigfleet-proxmox.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "bigfleet-proxmox.image" -}}
{{- printf "%s:%s" .Values.image.repository ((default .Chart.AppVersion .Values.image.tag) | toString) -}}
{{- end -}}

{{/* proxmox.nodes as the comma list --nodes expects; accepts a string or a list. */}}
{{- define "bigfleet-proxmox.nodes" -}}
{{- $n := .Values.proxmox.nodes -}}
{{- if kindIs "slice" $n -}}
{{- join "," $n -}}
{{- else -}}
{{- $n | toString | nospace -}}
{{- end -}}
{{- end -}}

{{/* Fixed in-container paths (the flags below point at them). */}}
{{- define "bigfleet-proxmox.tokenPath" -}}/etc/bigfleet/proxmox-token/token{{- end -}}
{{- define "bigfleet-proxmox.caPath" -}}/etc/bigfleet/proxmox-ca/ca.pem{{- end -}}
{{- define "bigfleet-proxmox.offeringsPath" -}}/etc/bigfleet/offerings/offerings.json{{- end -}}
{{- define "bigfleet-proxmox.instanceTypesPath" -}}/etc/bigfleet/instance-types/instance-types.json{{- end -}}
{{- define "bigfleet-proxmox.stateDir" -}}/var/lib/bigfleet{{- end -}}
{{- define "bigfleet-proxmox.tlsDir" -}}/etc/bigfleet/tls{{- end -}}

{{/*
Validation, included by the Deployment. The provider itself refuses to start
on the same mistakes; failing at render time reports them before anything is
applied. The fake backend needs none of this.
*/}}
{{- define "bigfleet-proxmox.validate" -}}
{{- $p := .Values.proxmox -}}
{{- if not .Values.useFakeBackend -}}
{{- $hint := "(or set useFakeBackend=true for a credential-free demo)" -}}
{{- if not $p.apiURL -}}
{{- fail (printf "bigfleet-proxmox: proxmox.apiURL is required for the real Proxmox backend, e.g. https://pve1.example.internal:8006/api2/json %s" $hint) -}}
{{- end -}}
{{- if not (hasPrefix "https://" ($p.apiURL | toString)) -}}
{{- fail (printf "bigfleet-proxmox: proxmox.apiURL must be an https:// URL (TLS to the Proxmox API cannot be disabled), got %q" ($p.apiURL | toString)) -}}
{{- end -}}
{{- if not $p.tokenID -}}
{{- fail (printf "bigfleet-proxmox: proxmox.tokenID (USER@REALM!TOKENID) is required for the real Proxmox backend %s" $hint) -}}
{{- end -}}
{{- if not (include "bigfleet-proxmox.nodes" .) -}}
{{- fail (printf "bigfleet-proxmox: proxmox.nodes (the cluster node names, e.g. pve1,pve2) is required for the real Proxmox backend %s" $hint) -}}
{{- end -}}
{{- if not .Values.credentials.token.secretName -}}
{{- fail (printf "bigfleet-proxmox: credentials.token.secretName (the Secret holding the API token secret) is required for the real Proxmox backend %s" $hint) -}}
{{- end -}}
{{- if not (or .Values.credentials.ca.secretName $p.tlsFingerprint) -}}
{{- fail (printf "bigfleet-proxmox: no TLS trust material for the Proxmox API: set credentials.ca.secretName (cluster CA bundle, e.g. /etc/pve/pve-root-ca.pem) or proxmox.tlsFingerprint (pinned SHA-256 of the API certificate); there is no skip-verify option %s" $hint) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "bigfleet-proxmox: tls.enabled=true needs tls.secretName (a Secret with tls.crt and tls.key, plus ca.crt for mTLS)" -}}
{{- end -}}
{{- if and .Values.tls.mtls (not .Values.tls.enabled) -}}
{{- fail "bigfleet-proxmox: tls.mtls=true needs tls.enabled=true (the provider rejects a client CA without a server certificate)" -}}
{{- end -}}
{{- end -}}

{{/*
The pod's terminationGracePeriodSeconds: 30 s above --shutdown-timeout unless
set, and never at or below it (Kubernetes would SIGKILL a stop in progress).
*/}}
{{- define "bigfleet-proxmox.terminationGrace" -}}
{{- $stop := .Values.shutdownTimeoutSeconds | int -}}
{{- $grace := .Values.terminationGracePeriodSeconds -}}
{{- if kindIs "invalid" $grace -}}
{{- add $stop 30 -}}
{{- else if le ($grace | int) $stop -}}
{{- fail (printf "bigfleet-proxmox: terminationGracePeriodSeconds (%d) must exceed shutdownTimeoutSeconds (%d), or Kubernetes kills the provider while it waits for running transitions; leave it null for %d" ($grace | int) $stop (add $stop 30)) -}}
{{- else -}}
{{- $grace | int -}}
{{- end -}}
{{- end -}}

{{/*
JSON file content from a values field: a string (e.g. from --set-file) is used
verbatim; a YAML list/map written inline in values is rendered as JSON.
*/}}
{{- define "bigfleet-proxmox.jsonContent" -}}
{{- if kindIs "string" . -}}
{{- . -}}
{{- else -}}
{{- toPrettyJson . -}}
{{- end -}}
{{- end -}}
