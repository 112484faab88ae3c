{{/*
Named templates shared by the chart's manifests. Nothing here renders a manifest of its own.
*/}}

{{/*
gpu-scheduler.keys: keys.yaml, the keys the programs agree on (annotations, environment variables, the API group,
the Lease namespace, ...), each equal to the constant of the same name in src/gpu_scheduling/constants.py.
Use: $keys := include "gpu-scheduler.keys" . | fromYaml
*/}}
{{- define "gpu-scheduler.keys" -}}
{{- $text := .Files.Get "keys.yaml" -}}
{{- if not $text -}}
{{- fail "keys.yaml is missing from the chart (is it in .helmignore?): the templates take every key the programs agree on from it" -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* gpu-scheduler.schedulerName: scheduler.name, or the programs' default scheduler name. */}}
{{- define "gpu-scheduler.schedulerName" -}}
{{- $keys := include "gpu-scheduler.keys" . | fromYaml -}}
{{- .Values.scheduler.name | default $keys.default_scheduler_name -}}
{{- end -}}

{{/* gpu-scheduler.boardName: board.name, or the program's name (keys.yaml board_name). */}}
{{- define "gpu-scheduler.boardName" -}}
{{- $keys := include "gpu-scheduler.keys" . | fromYaml -}}
{{- .Values.board.name | default $keys.board_name -}}
{{- end -}}

{{/*
gpu-scheduler.serviceAccountUser: the username the apiserver gives a service account of the release's namespace.
Use: include "gpu-scheduler.serviceAccountUser" (dict "root" $ "name" $name)
*/}}
{{- define "gpu-scheduler.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .root.Release.Namespace .name -}}
{{- end -}}

{{/*
gpu-scheduler.selectorLabels: what a workload's selector matches, `app: <name>` as the scenarios and the
test-bed's earlier manifests select by (a Deployment's selector cannot change once it exists).
Use: include "gpu-scheduler.selectorLabels" $name
*/}}
{{- define "gpu-scheduler.selectorLabels" -}}
app: {{ . }}
{{- end -}}

{{/*
gpu-scheduler.podLabels: the labels of a workload's pods: the selector and the names that do not change from one
chart version to the next (so that a new chart version alone does not roll the pods).
Use: include "gpu-scheduler.podLabels" (dict "root" $ "name" $name "component" "scheduler")
*/}}
{{- define "gpu-scheduler.podLabels" -}}
{{ include "gpu-scheduler.selectorLabels" .name }}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: {{ include "gpu-scheduler.partOf" . }}
{{- end -}}

{{/* gpu-scheduler.partOf: the project's name (pyproject.toml), the value of app.kubernetes.io/part-of. */}}
{{- define "gpu-scheduler.partOf" -}}
gpu-scheduling
{{- end -}}

{{/*
gpu-scheduler.labels: the labels of every object of the chart (Kubernetes' recommended labels).
Use: include "gpu-scheduler.labels" (dict "root" $ "name" $name "component" "scheduler")
*/}}
{{- define "gpu-scheduler.labels" -}}
{{ include "gpu-scheduler.podLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
gpu-scheduler.image: `[<registry>/]<repository>:<tag>` of one component: its image.registry, else imageRegistry,
else none; its image.tag, else the chart's appVersion.
Use: include "gpu-scheduler.image" (dict "root" $ "image" .Values.scheduler.image)
*/}}
{{- define "gpu-scheduler.image" -}}
{{- $registry := .image.registry | default .root.Values.imageRegistry | trimSuffix "/" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion | toString -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
gpu-scheduler.logArgs: the --log-level and --log-format every program takes.
*/}}
{{- define "gpu-scheduler.logArgs" -}}
- --log-level={{ .Values.logLevel }}
- --log-format={{ .Values.logFormat }}
{{- end -}}

{{/*
Pod and container security settings shared by every workload: uid/gid 1000, non-root, the RuntimeDefault seccomp
profile, a read-only root filesystem, no privilege escalation and no capabilities. The images run as uid 1000 and
write nothing to their root filesystem (images/<program>/Dockerfile).
Use: securityContext: followed by include "gpu-scheduler.podSecurityContext" . | nindent 8
*/}}
{{- define "gpu-scheduler.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 1000
runAsGroup: 1000
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpu-scheduler.containerSecurityContext" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
{{- end -}}

{{/*
gpu-scheduler.pdb: a PodDisruptionBudget for a workload with `replicas` replicas, or nothing when it is disabled.
A budget that keeps every replica would make every drain wait forever: refused.
Use: include "gpu-scheduler.pdb" (dict "root" $ "name" $name "component" "scheduler" "values" .Values.scheduler "key" "scheduler")
*/}}
{{- define "gpu-scheduler.pdb" -}}
{{- $pdb := .values.podDisruptionBudget -}}
{{- if $pdb.enabled -}}
{{- $min := $pdb.minAvailable -}}
{{- if and (kindIs "string" $min | not) (ge (int $min) (int .values.replicas)) -}}
{{- fail (printf "%s.podDisruptionBudget.minAvailable (%d) must be below %s.replicas (%d), or no drain could ever evict a replica; disable %s.podDisruptionBudget for a single replica" .key (int $min) .key (int .values.replicas) .key) -}}
{{- end -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "gpu-scheduler.labels" (dict "root" .root "name" .name "component" .component) | nindent 4 }}
spec:
  minAvailable: {{ $min }}
  selector:
    matchLabels:
      {{- include "gpu-scheduler.selectorLabels" .name | nindent 6 }}
{{- end -}}
{{- end -}}

{{/*
gpu-scheduler.webhook.checkMode: fails with a clear message when the webhook's TLS values do not make one of the
three modes:
  - service, generated: webhook.url, webhook.tls.existingSecret and webhook.tls.caBundle empty;
  - service, existing Secret: webhook.tls.existingSecret and webhook.tls.caBundle (its CA), webhook.url empty;
  - URL: webhook.url and webhook.tls.caBundle, webhook.tls.existingSecret empty (the chart deploys no webhook).
*/}}
{{- define "gpu-scheduler.webhook.checkMode" -}}
{{- $tls := .Values.webhook.tls -}}
{{- if .Values.webhook.url -}}
{{- if $tls.existingSecret -}}
{{- fail "webhook.url is set: the webhook runs outside the chart, which deploys none, so webhook.tls.existingSecret has no use; leave it empty and give webhook.tls.caBundle, the CA of the certificate served at webhook.url" -}}
{{- end -}}
{{- if not $tls.caBundle -}}
{{- fail "webhook.url is set: give webhook.tls.caBundle too, the base64 of the PEM CA that signed the certificate served at webhook.url" -}}
{{- end -}}
{{- else if and $tls.existingSecret (not $tls.caBundle) -}}
{{- fail (printf "webhook.tls.existingSecret (%s) is set: give webhook.tls.caBundle too, the base64 of the PEM CA that signed its certificate (the apiserver trusts only that CA), or leave both empty and the chart generates them" $tls.existingSecret) -}}
{{- else if and $tls.caBundle (not $tls.existingSecret) -}}
{{- fail "webhook.tls.caBundle is set: give webhook.tls.existingSecret too, the kubernetes.io/tls Secret whose certificate that CA signed, or leave both empty and the chart generates them" -}}
{{- else if not $tls.existingSecret -}}
{{- include "gpu-scheduler.tls.checkLifetimes" (dict "values" $tls "key" "webhook.tls") -}}
{{- end -}}
{{- if and $tls.caBundle (not (contains "-----BEGIN CERTIFICATE-----" (b64dec $tls.caBundle))) -}}
{{- fail "webhook.tls.caBundle must be the base64 of a PEM CA certificate (-----BEGIN CERTIFICATE-----...), as in a Secret's ca.crt" -}}
{{- end -}}
{{- end -}}

{{/*
gpu-scheduler.webhook.tls: the webhook's TLS material as YAML:
  caBundle: the base64 PEM CA the MutatingWebhookConfiguration pins;
  checksum: a digest of the serving certificate, put on the webhook's pods so that a new certificate rolls them;
  generated: only when the chart makes the certificate (no existingSecret, no url): the CA's and the serving
    certificate's PEM, keys and expiry (unix seconds), and the DNS names the certificate carries.
The generated material is made once per render and kept in .Values.webhook.tls (a Secret and the
MutatingWebhookConfiguration are different templates, and must get the same CA). On an upgrade the CA and the
certificate already in the cluster (lookup) are reused as long as they are valid for more than
webhook.tls.renewBeforeDays and the certificate names the Service's current DNS names, so the caBundle stays the
same; `helm template` reaches no cluster and makes new ones every time.
Use: $tls := include "gpu-scheduler.webhook.tls" . | fromYaml
*/}}
{{- define "gpu-scheduler.webhook.tls" -}}
{{- include "gpu-scheduler.webhook.checkMode" . -}}
{{- $values := .Values.webhook.tls -}}
{{- if not (hasKey $values "__rendered") -}}
{{- $keys := include "gpu-scheduler.keys" . | fromYaml -}}
{{- $result := dict -}}
{{- if or .Values.webhook.url $values.existingSecret -}}
{{- $cert := $values.certChecksum -}}
{{- if and (not $cert) $values.existingSecret -}}
{{- $cert = dig "data" "tls.crt" "" (lookup "v1" "Secret" .Release.Namespace $values.existingSecret | default dict) -}}
{{- end -}}
{{- $_ := set $result "caBundle" $values.caBundle -}}
{{- $_ := set $result "checksum" (sha256sum (printf "%s\n%s" $values.caBundle $cert)) -}}
{{- else -}}
{{- $result = include "gpu-scheduler.tls.generated" (dict "root" . "values" $values "service" .Values.webhook.name "secret" $keys.webhook_tls_secret "caName" (printf "%s webhook CA" .Values.webhook.name)) | fromYaml -}}
{{- end -}}
{{- $_ := set $values "__rendered" $result -}}
{{- end -}}
{{- index $values "__rendered" | toYaml -}}
{{- end -}}

{{/*
gpu-scheduler.board.tls: the board's TLS material as YAML: secretName (what its pods mount), checksum (a digest of
the certificate, put on its pods so that a new one rolls them) and, when the chart makes them (no
board.tls.secretName), generated (see gpu-scheduler.tls.generated: the Secrets <name>-tls-ca and <name>-tls, for
the Service's DNS names, localhost and 127.0.0.1, so that a port-forward's https://localhost:8443/ matches too).
Made once per render (kept in .Values.board.tls), since the Secrets and the Deployment are different templates.
Use: $tls := include "gpu-scheduler.board.tls" . | fromYaml
*/}}
{{- define "gpu-scheduler.board.tls" -}}
{{- $values := .Values.board.tls -}}
{{- if not (hasKey $values "__rendered") -}}
{{- $name := include "gpu-scheduler.boardName" . -}}
{{- $result := dict -}}
{{- if $values.secretName -}}
{{- $cert := dig "data" "tls.crt" "" (lookup "v1" "Secret" .Release.Namespace $values.secretName | default dict) -}}
{{- $_ := set $result "checksum" (sha256sum $cert) -}}
{{- $_ := set $result "secretName" $values.secretName -}}
{{- else -}}
{{- include "gpu-scheduler.tls.checkLifetimes" (dict "values" $values "key" "board.tls") -}}
{{- $secret := printf "%s-tls" $name -}}
{{- $result = include "gpu-scheduler.tls.generated" (dict "root" . "values" $values "service" $name "secret" $secret "caName" (printf "%s CA" $name) "extraDNS" (list "localhost") "ips" (list "127.0.0.1")) | fromYaml -}}
{{- $_ := set $result "secretName" $secret -}}
{{- end -}}
{{- $_ := set $values "__rendered" $result -}}
{{- end -}}
{{- index $values "__rendered" | toYaml -}}
{{- end -}}

{{/*
gpu-scheduler.tls.checkLifetimes: fails with a clear message when a generated CA's and certificate's lifetimes do
not fit together (`key` names the values in the message, e.g. webhook.tls).
Use: include "gpu-scheduler.tls.checkLifetimes" (dict "values" .Values.webhook.tls "key" "webhook.tls")
*/}}
{{- define "gpu-scheduler.tls.checkLifetimes" -}}
{{- $v := .values -}}
{{- if ge (int $v.renewBeforeDays) (int $v.certValidityDays) -}}
{{- fail (printf "%s.renewBeforeDays (%d) must be below %s.certValidityDays (%d), or every upgrade would make a new certificate" .key (int $v.renewBeforeDays) .key (int $v.certValidityDays)) -}}
{{- end -}}
{{- if ge (int $v.renewBeforeDays) (int $v.caValidityDays) -}}
{{- fail (printf "%s.renewBeforeDays (%d) must be below %s.caValidityDays (%d), or every upgrade would make a new CA" .key (int $v.renewBeforeDays) .key (int $v.caValidityDays)) -}}
{{- end -}}
{{- if gt (int $v.certValidityDays) (int $v.caValidityDays) -}}
{{- fail (printf "%s.certValidityDays (%d) must not exceed %s.caValidityDays (%d): the certificate would outlive the CA that signed it" .key (int $v.certValidityDays) .key (int $v.caValidityDays)) -}}
{{- end -}}
{{- end -}}

{{/*
gpu-scheduler.tls.generated: a CA and a serving certificate made by the chart for a Service, as YAML:
  caBundle: the base64 PEM CA; checksum: a digest of the serving certificate (put on the pods, so that a new one
  rolls them); generated: the CA's and the certificate's PEM, keys and expiry (unix seconds), and the DNS names the
  certificate carries.
They are kept in the Secrets <secret>-ca (the CA) and <secret> (tls.crt, tls.key, ca.crt). On an upgrade the CA and
the certificate already in the cluster (lookup) are reused as long as they are valid for more than
values.renewBeforeDays and the certificate names the current DNS names, so the CA stays the same; `helm template`
reaches no cluster and makes new ones every time.
Arguments: root ($), values (caValidityDays, certValidityDays, renewBeforeDays), service (the Service's name: the
DNS names <service>, <service>.<ns>, <service>.<ns>.svc, <service>.<ns>.svc.cluster.local), secret, caName (the
CA's common name), and optionally extraDNS and ips (more names the certificate carries, e.g. localhost for a
port-forward).
Use: $tls := include "gpu-scheduler.tls.generated" (dict "root" $ "values" ... "service" ... "secret" ... "caName" ...) | fromYaml
*/}}
{{- define "gpu-scheduler.tls.generated" -}}
{{- $values := .values -}}
{{- $ns := .root.Release.Namespace -}}
{{- $svc := .service -}}
{{- $dnsNames := concat (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) (.extraDNS | default list) -}}
{{- $ips := .ips | default list -}}
{{- $names := join "," (concat $dnsNames $ips) -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $renew := mul (int $values.renewBeforeDays) 86400 -}}
{{- $notAfterKey := "gpu-scheduling.io/not-after" -}}
{{- $dnsNamesKey := "gpu-scheduling.io/dns-names" -}}
{{- $caSecret := lookup "v1" "Secret" $ns (printf "%s-ca" .secret) | default dict -}}
{{- $caCrt := dig "data" "tls.crt" "" $caSecret -}}
{{- $caKey := dig "data" "tls.key" "" $caSecret -}}
{{- $caNotAfter := dig "metadata" "annotations" $notAfterKey "0" $caSecret | int64 -}}
{{- $ca := dict -}}
{{- if and $caCrt $caKey (gt (sub $caNotAfter $renew) $now) -}}
{{- $ca = buildCustomCert $caCrt $caKey -}}
{{- else -}}
{{- $ca = genCAWithKey .caName (int $values.caValidityDays) (genPrivateKey "ecdsa") -}}
{{- $caNotAfter = add $now (mul (int $values.caValidityDays) 86400) -}}
{{- end -}}
{{- $tlsSecret := lookup "v1" "Secret" $ns .secret | default dict -}}
{{- $crt := dig "data" "tls.crt" "" $tlsSecret -}}
{{- $key := dig "data" "tls.key" "" $tlsSecret -}}
{{- $notAfter := dig "metadata" "annotations" $notAfterKey "0" $tlsSecret | int64 -}}
{{- $sameCA := eq (dig "data" "ca.crt" "" $tlsSecret) (b64enc $ca.Cert) -}}
{{- $sameNames := eq (dig "metadata" "annotations" $dnsNamesKey "" $tlsSecret) $names -}}
{{- $serving := dict -}}
{{- if and $crt $key $sameCA $sameNames (gt (sub $notAfter $renew) $now) -}}
{{- $serving = dict "Cert" (b64dec $crt) "Key" (b64dec $key) -}}
{{- else -}}
{{- $serving = genSignedCertWithKey (printf "%s.%s.svc" $svc $ns) (empty $ips | ternary nil $ips) $dnsNames (int $values.certValidityDays) $ca (genPrivateKey "ecdsa") -}}
{{- $notAfter = add $now (mul (int $values.certValidityDays) 86400) -}}
{{- end -}}
caBundle: {{ b64enc $ca.Cert | quote }}
checksum: {{ sha256sum $serving.Cert | quote }}
generated:
  {{- toYaml (dict "caCert" $ca.Cert "caKey" $ca.Key "caNotAfter" (toString $caNotAfter) "cert" $serving.Cert "key" $serving.Key "notAfter" (toString $notAfter) "dnsNames" $names) | nindent 2 }}
{{- end -}}

{{/*
gpu-scheduler.metricsLabel: the label of the Services whose pods the ServiceMonitor scrapes (the scheduler's and the
agent's metrics Services, the webhook's Service).
Use: include "gpu-scheduler.metricsLabel" $
*/}}
{{- define "gpu-scheduler.metricsLabel" -}}
gpu-scheduling.io/metrics: "true"
{{- end -}}

{{/*
gpu-scheduler.isolatedGpus: "true" where gpu-device-plugin gives containers only their own GPUs (NVML, NVIDIA's
runtime): the webhook then numbers CUDA_VISIBLE_DEVICES from 0 and the scheduler expects it so (--isolated-gpus).
One place, so the two programs never disagree.
*/}}
{{- define "gpu-scheduler.isolatedGpus" -}}
{{- if and .Values.agent.enabled .Values.agent.devicePlugin.enabled (eq .Values.agent.devicePlugin.source "nvml") -}}
true
{{- end -}}
{{- end -}}
