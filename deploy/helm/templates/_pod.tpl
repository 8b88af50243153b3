{{/*
The provider's arguments, volumes and mounts, shared by the Deployment and the
`helm test` preflight Pod so both run with exactly the same flags and files.
Called with (dict "root" $ "withState" bool): the preflight Pod leaves the
state file out, because it belongs to the serving pod (one writer, and a
ReadWriteOnce volume) and preflight only checks the cluster.
*/}}

{{- define "bigfleet-proxmox.args" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $real := not $v.useFakeBackend -}}
- {{ printf "--addr=:%d" ($v.ports.grpc | int) | quote }}
- {{ printf "--metrics-addr=:%d" ($v.ports.metrics | int) | quote }}
- {{ printf "--provider=%s" $v.provider | quote }}
{{- if $real }}
# Explicit, so a missing API URL fails instead of falling back to "auto".
- "--proxmox-backend=proxmox"
- {{ printf "--proxmox-api-url=%s" $v.proxmox.apiURL | quote }}
- {{ printf "--proxmox-token-id=%s" $v.proxmox.tokenID | quote }}
# The secret is read from a file so it never shows in the process args.
- {{ printf "--proxmox-token-file=%s" (include "bigfleet-proxmox.tokenPath" $root) | quote }}
{{- if $v.credentials.ca.secretName }}
- {{ printf "--proxmox-ca-file=%s" (include "bigfleet-proxmox.caPath" $root) | quote }}
{{- end }}
{{- with $v.proxmox.tlsFingerprint }}
- {{ printf "--proxmox-tls-fingerprint=%s" . | quote }}
{{- end }}
{{- with $v.proxmox.pool }}
- {{ printf "--proxmox-pool=%s" . | quote }}
{{- end }}
- {{ printf "--nodes=%s" (include "bigfleet-proxmox.nodes" $root) | quote }}
{{- with $v.proxmox.capacity }}
{{- with .memoryOvercommit }}
- {{ printf "--proxmox-memory-overcommit=%s" . | quote }}
{{- end }}
{{- with .memoryReserve }}
- {{ printf "--proxmox-memory-reserve=%s" . | quote }}
{{- end }}
{{- with .cpuOvercommit }}
- {{ printf "--proxmox-cpu-overcommit=%s" . | quote }}
{{- end }}
{{- end }}
{{- else }}
- "--use-fake-backend"
{{- end }}
{{- with $v.proxmox.templateVMID }}
{{- if kindIs "map" . }}
{{- $pairs := list }}
{{- range $node, $vmid := . }}
{{- $pairs = append $pairs (printf "%s=%d" $node ($vmid | int64)) }}
{{- end }}
- {{ printf "--template-vmid=%s" (join "," $pairs) | quote }}
{{- else }}
# int64: a large VMID read as a float would otherwise print as 1e+06.
- {{ printf "--template-vmid=%d" (. | int64) | quote }}
{{- end }}
{{- end }}
{{- with $v.proxmox.templateName }}
- {{ printf "--template-name=%s" . | quote }}
{{- end }}
{{- if and .withState $v.state.enabled }}
- {{ printf "--state=%s/%s" (include "bigfleet-proxmox.stateDir" $root) $v.state.fileName | quote }}
{{- end }}
{{- if $v.offerings.content }}
- {{ printf "--offerings=%s" (include "bigfleet-proxmox.offeringsPath" $root) | quote }}
{{- end }}
{{- if $v.instanceTypes.content }}
- {{ printf "--instance-types=%s" (include "bigfleet-proxmox.instanceTypesPath" $root) | quote }}
{{- end }}
{{- with $v.pricing.prices }}
{{- $pairs := list }}
{{- range $type, $usd := . }}
{{- $pairs = append $pairs (printf "%s=%s" $type (include "bigfleet-proxmox.decimal" $usd)) }}
{{- end }}
- {{ printf "--prices=%s" (join "," $pairs) | quote }}
{{- end }}
{{- if ne (include "bigfleet-proxmox.decimal" $v.pricing.perVcpuHour) "" }}
- {{ printf "--price-per-vcpu-hour=%s" (include "bigfleet-proxmox.decimal" $v.pricing.perVcpuHour) | quote }}
{{- end }}
{{- if ne (include "bigfleet-proxmox.decimal" $v.pricing.perGiBHour) "" }}
- {{ printf "--price-per-gib-hour=%s" (include "bigfleet-proxmox.decimal" $v.pricing.perGiBHour) | quote }}
{{- end }}
{{- with $v.bootstrap.path }}
- {{ printf "--bootstrap-path=%s" . | quote }}
{{- end }}
{{- with $v.bootstrap.exec }}
- {{ printf "--bootstrap-exec=%s" (join "," .) | quote }}
{{- end }}
{{- $interval := $v.reconcileInterval | toString }}
{{- if ne $interval "" }}
- {{ printf "--reconcile-interval=%s" $interval | quote }}
{{- end }}
{{- if not $v.reflection }}
- "--reflection=false"
{{- end }}
- {{ printf "--shutdown-timeout=%ds" ($v.shutdownTimeoutSeconds | int) | quote }}
{{- if $v.tls.enabled }}
- {{ printf "--tls-cert=%s/tls.crt" (include "bigfleet-proxmox.tlsDir" $root) | quote }}
- {{ printf "--tls-key=%s/tls.key" (include "bigfleet-proxmox.tlsDir" $root) | quote }}
{{- if $v.tls.mtls }}
- {{ printf "--tls-ca=%s/ca.crt" (include "bigfleet-proxmox.tlsDir" $root) | quote }}
{{- end }}
{{- end }}
{{- range $v.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/*
A price as the flag wants it: numbers from a values file print in plain
decimal (not 4e-03), strings from --set pass through; "" means unset.
*/}}
{{- define "bigfleet-proxmox.decimal" -}}
{{- if kindIs "string" . -}}
{{- . -}}
{{- else if kindIs "invalid" . -}}
{{- else -}}
{{- regexReplaceAll "\\.?0+$" (printf "%.9f" (. | float64)) "" -}}
{{- end -}}
{{- end -}}

{{- define "bigfleet-proxmox.volumeMounts" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
- name: tmp
  mountPath: /tmp
{{- if not $v.useFakeBackend }}
- name: proxmox-token
  mountPath: /etc/bigfleet/proxmox-token
  readOnly: true
{{- if $v.credentials.ca.secretName }}
- name: proxmox-ca
  mountPath: /etc/bigfleet/proxmox-ca
  readOnly: true
{{- end }}
{{- end }}
{{- if and .withState $v.state.enabled }}
- name: state
  mountPath: {{ include "bigfleet-proxmox.stateDir" $root }}
{{- end }}
{{- if $v.offerings.content }}
- name: offerings
  mountPath: /etc/bigfleet/offerings
  readOnly: true
{{- end }}
{{- if $v.instanceTypes.content }}
- name: instance-types
  mountPath: /etc/bigfleet/instance-types
  readOnly: true
{{- end }}
{{- if $v.tls.enabled }}
- name: tls
  mountPath: {{ include "bigfleet-proxmox.tlsDir" $root }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "bigfleet-proxmox.volumes" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $fullname := include "bigfleet-proxmox.fullname" $root -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if not $v.useFakeBackend }}
- name: proxmox-token
  secret:
    secretName: {{ $v.credentials.token.secretName }}
    # Only the token key, under a fixed name the flag points at.
    items:
      - key: {{ $v.credentials.token.secretKey }}
        path: token
    defaultMode: 0440
{{- if $v.credentials.ca.secretName }}
- name: proxmox-ca
  secret:
    secretName: {{ $v.credentials.ca.secretName }}
    items:
      - key: {{ $v.credentials.ca.secretKey }}
        path: ca.pem
    defaultMode: 0444
{{- end }}
{{- end }}
{{- if and .withState $v.state.enabled }}
- name: state
  {{- if $v.state.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ default (printf "%s-state" $fullname) $v.state.persistence.existingClaim }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end }}
{{- if $v.offerings.content }}
- name: offerings
  configMap:
    name: {{ $fullname }}-offerings
{{- end }}
{{- if $v.instanceTypes.content }}
- name: instance-types
  configMap:
    name: {{ $fullname }}-instance-types
{{- end }}
{{- if $v.tls.enabled }}
- name: tls
  secret:
    secretName: {{ $v.tls.secretName }}
    items:
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- if $v.tls.mtls }}
      - key: ca.crt
        path: ca.crt
      {{- end }}
    defaultMode: 0440
{{- end }}
{{- end -}}
