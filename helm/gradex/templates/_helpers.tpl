{{/* Names, labels and small shared pieces of the gradex chart. */}}

{{- define "gradex.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gradex.fullname" -}}
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

{{/* The gradex job id: job.id, or the full name. */}}
{{- define "gradex.jobId" -}}
{{- default (include "gradex.fullname" .) .Values.job.id -}}
{{- end -}}

{{- define "gradex.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gradex.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
gradex.dev/job: {{ include "gradex.jobId" . | trunc 63 | trimSuffix "-" | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component (coordinator / trainer). */}}
{{- define "gradex.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gradex.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gradex.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gradex.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* registry/repository:tag@digest; the tag defaults to the appVersion. */}}
{{- define "gradex.image" -}}
{{- $img := .image -}}
{{- $repo := required "image.repository is required (the coordinator/trainer image to run)" $img.repository -}}
{{- $ref := $repo -}}
{{- if $img.registry }}{{ $ref = printf "%s/%s" $img.registry $repo }}{{ end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $ref $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "gradex.tokenSecretName" -}}
{{- default (printf "%s-token" (include "gradex.fullname" .)) .Values.token.existingSecret -}}
{{- end -}}

{{/* The name the coordinator's certificate carries (the Service's DNS name). */}}
{{- define "gradex.serverName" -}}
{{- default (printf "%s-coordinator.%s.svc" (include "gradex.fullname" .) .Release.Namespace) .Values.tls.serverName -}}
{{- end -}}

{{- define "gradex.coordinatorAddress" -}}
{{- printf "%s-coordinator.%s.svc:%d" (include "gradex.fullname" .) .Release.Namespace (int .Values.service.grpcPort) -}}
{{- end -}}

{{/* Processes per trainer pod: workload.nprocPerNode, or workload.gpusPerPod
(one rank per GPU) when that is set. */}}
{{- define "gradex.nprocPerNode" -}}
{{- if .Values.workload.gpusPerPod -}}{{ int .Values.workload.gpusPerPod }}{{- else -}}{{ int .Values.workload.nprocPerNode }}{{- end -}}
{{- end -}}

{{/* The trainer container's metrics port of local rank N (names are at most
15 characters: gx-metrics-0 .. gx-metrics-9999). */}}
{{- define "gradex.metricsPortName" -}}
{{- printf "gx-metrics-%d" (int .) -}}
{{- end -}}

{{/* Checks of values that the schema cannot express (cross-field). */}}
{{- define "gradex.validate" -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt)" -}}
{{- end -}}
{{- if and .Values.tls.clientAuth (not .Values.tls.enabled) -}}
{{- fail "tls.clientAuth needs tls.enabled" -}}
{{- end -}}
{{- if and .Values.tls.clientAuth .Values.workload.enabled (not .Values.tls.clientSecretName) -}}
{{- fail "tls.clientAuth with the example workload needs tls.clientSecretName (the trainers' client certificate)" -}}
{{- end -}}
{{- if gt (int .Values.workload.ucxPortRange.start) (int .Values.workload.ucxPortRange.end) -}}
{{- fail (printf "workload.ucxPortRange: start %d is after end %d" (int .Values.workload.ucxPortRange.start) (int .Values.workload.ucxPortRange.end)) -}}
{{- end -}}
{{- $nproc := int (include "gradex.nprocPerNode" .) -}}
{{- if and .Values.workload.gpusPerPod (ne (int .Values.workload.nprocPerNode) 1) (ne (int .Values.workload.nprocPerNode) (int .Values.workload.gpusPerPod)) -}}
{{- fail (printf "workload.gpusPerPod (%d) sets the processes per pod (one per GPU); workload.nprocPerNode (%d) must be left at 1 or equal it" (int .Values.workload.gpusPerPod) (int .Values.workload.nprocPerNode)) -}}
{{- end -}}
{{- if and .Values.workload.enabled (ne (int .Values.job.worldSize) (mul (int .Values.workload.replicas) $nproc)) -}}
{{- fail (printf "job.worldSize (%d) must equal workload.replicas x %s (%d x %d)" (int .Values.job.worldSize) (ternary "workload.gpusPerPod" "workload.nprocPerNode" (gt (int .Values.workload.gpusPerPod) 0)) (int .Values.workload.replicas) $nproc) -}}
{{- end -}}
{{- $mlast := add (int .Values.workload.metricsPort) $nproc -1 -}}
{{- if gt $mlast 65535 -}}
{{- fail (printf "workload.metricsPort (%d) + %d local ranks run past port 65535: lower workload.metricsPort" (int .Values.workload.metricsPort) $nproc) -}}
{{- end -}}
{{- range $p := list (int .Values.workload.rendezvousPort) (int .Values.workload.ucxPortRange.start) (int .Values.workload.ucxPortRange.end) -}}
{{- if and (ge $p (int $.Values.workload.metricsPort)) (le $p $mlast) -}}
{{- fail (printf "workload.metricsPort: the local ranks' metrics ports %d..%d overlap port %d (rendezvousPort or ucxPortRange)" (int $.Values.workload.metricsPort) $mlast $p) -}}
{{- end -}}
{{- end -}}
{{- if and (lt (int .Values.workload.ucxPortRange.start) (int .Values.workload.metricsPort)) (gt (int .Values.workload.ucxPortRange.end) $mlast) -}}
{{- fail (printf "workload.metricsPort: the local ranks' metrics ports %d..%d lie inside ucxPortRange" (int .Values.workload.metricsPort) $mlast) -}}
{{- end -}}
{{- if ne 0 (mod (int .Values.job.worldSize) (int .Values.job.teams)) -}}
{{- fail (printf "job.teams (%d) must divide job.worldSize (%d)" (int .Values.job.teams) (int .Values.job.worldSize)) -}}
{{- end -}}
{{- include "gradex.validatePs" . -}}
{{- end -}}

{{/* Peers allowed to scrape a metrics port (NetworkPolicy). */}}
{{- define "gradex.metricsPeer" -}}
- namespaceSelector:
    {{- toYaml (default (dict) .Values.networkPolicy.metricsNamespaceSelector) | nindent 4 }}
  podSelector:
    {{- toYaml (default (dict) .Values.networkPolicy.metricsPodSelector) | nindent 4 }}
{{- end -}}

{{/* The trainers' DNS names: <fullname>-trainer-<i>.<fullname>-trainers. */}}
{{- define "gradex.trainerService" -}}
{{- printf "%s-trainers" (include "gradex.fullname" .) -}}
{{- end -}}

{{/* A trainer container (name given: PyTorchJob wants "pytorch"). */}}
{{- define "gradex.trainerContainer" -}}
{{- $root := .root -}}
{{- $w := $root.Values.workload -}}
{{- $tls := "/etc/gradex/tls" -}}
- name: {{ .name }}
  image: {{ include "gradex.image" (dict "image" $w.image "root" $root) | quote }}
  imagePullPolicy: {{ $w.image.pullPolicy }}
  {{- if $w.command }}
  command:
    {{- toYaml $w.command | nindent 4 }}
  {{- with concat $w.args $w.extraArgs }}
  args:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- else }}
  # The example: torchrun of the image's Fashion-MNIST trainer through
  # gradex's DDP hook, one node per pod (its node rank: the indexed Job's
  # NODE_RANK, or the RANK a PyTorchJob's operator sets). Debian 12's
  # torchrun needs --redirects/--tee under Python 3.11.
  command: [/bin/sh, -c]
  args:
    - >-
      exec torchrun --nnodes="$NNODES" --nproc_per_node="$NPROC_PER_NODE"
      --node_rank="${NODE_RANK:-${RANK:-0}}" --master_addr="$MASTER_ADDR"
      --master_port="$MASTER_PORT" --redirects 1 --tee 1
      {{- if include "gradex.psJob" $root }}
      {{- /* DGS: DGSOptimizer against the job's servers (GRADEX_COORDINATOR is
      set, so no rank hosts a server in-process); density 1 is ASGD. */}}
      /opt/gradex/examples/train_dgs_fashion_mnist.py --backend gradex
      --mode={{ ternary "asgd" "dgs" (eq (float64 $root.Values.job.density) 1.0) }}
      --density={{ $root.Values.job.density }} --lr={{ $w.example.dgsLr }}
      --hidden={{ join "," $w.example.hidden }} --epochs={{ int $w.example.epochs }}
      --max-rounds={{ int64 $w.example.maxSteps }} --batch-size={{ int $w.example.batchSize }} "$@"
      {{- else }}
      /opt/gradex/examples/train_fashion_mnist.py --algorithm={{ $root.Values.job.algorithm }}
      --density={{ $root.Values.job.density }} --epochs={{ int $w.example.epochs }}
      --max-steps={{ int64 $w.example.maxSteps }} --batch-size={{ int $w.example.batchSize }}
      {{- if $w.gpusPerPod }} --device=auto{{ end }} "$@"
      {{- end }}
    - gradex-example
    {{- with $w.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  env:
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    # The hierarchical exchange's node: the pod, which all its ranks share
    # and no other pod does (not spec.nodeName: two pods on one machine share
    # no shared memory or IPC, so they are two nodes; README, "GPU nodes").
    - name: GRADEX_NODE
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: GRADEX_HIERARCHY
      value: {{ $root.Values.job.hierarchy | quote }}
    - name: GRADEX_COORDINATOR
      value: {{ include "gradex.coordinatorAddress" $root | quote }}
    - name: GRADEX_JOB
      value: {{ include "gradex.jobId" $root | quote }}
    - name: GRADEX_TOKEN_FILE
      value: /etc/gradex/token/{{ $root.Values.token.secretKey }}
    # The base: the process of local rank l serves metricsPort + l.
    - name: GRADEX_METRICS_PORT
      value: {{ $w.metricsPort | quote }}
    - name: GRADEX_METRICS_ADDR
      value: 0.0.0.0
    {{- if $root.Values.tls.enabled }}
    - name: GRADEX_TLS_CA_FILE
      value: {{ $tls }}/ca.crt
    - name: GRADEX_TLS_SERVER_NAME
      value: {{ include "gradex.serverName" $root | quote }}
    {{- if $root.Values.tls.clientAuth }}
    - name: GRADEX_TLS_CERT_FILE
      value: {{ $tls }}/client/tls.crt
    - name: GRADEX_TLS_KEY_FILE
      value: {{ $tls }}/client/tls.key
    {{- end }}
    {{- end }}
    - name: UCX_TCP_PORT_RANGE
      value: "{{ $w.ucxPortRange.start }}-{{ $w.ucxPortRange.end }}"
    - name: NNODES
      value: {{ $w.replicas | quote }}
    - name: NPROC_PER_NODE
      value: {{ include "gradex.nprocPerNode" $root | quote }}
    {{- with .env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with $w.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    {{- range $l := until (int (include "gradex.nprocPerNode" $root)) }}
    # local rank {{ $l }}'s metrics (GRADEX_METRICS_PORT + LOCAL_RANK)
    - name: {{ include "gradex.metricsPortName" $l }}
      containerPort: {{ add (int $w.metricsPort) $l }}
      protocol: TCP
    {{- end }}
    - name: rendezvous
      containerPort: {{ $w.rendezvousPort }}
      protocol: TCP
  {{- $res := deepCopy (default (dict) $w.resources) }}
  {{- if $w.gpusPerPod }}
  {{- /* An extended resource: requests must equal limits. */}}
  {{- $_ := set $res "limits" (merge (dict "nvidia.com/gpu" (int $w.gpusPerPod)) (default (dict) $res.limits)) }}
  {{- $_ := set $res "requests" (merge (dict "nvidia.com/gpu" (int $w.gpusPerPod)) (default (dict) $res.requests)) }}
  {{- end }}
  {{- with $res }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $w.securityContext | nindent 4 }}
  volumeMounts:
    - name: token
      mountPath: /etc/gradex/token
      readOnly: true
    {{- if $root.Values.tls.enabled }}
    - name: tls
      mountPath: {{ $tls }}
      readOnly: true
    {{- if $root.Values.tls.clientAuth }}
    - name: tls-client
      mountPath: {{ $tls }}/client
      readOnly: true
    {{- end }}
    {{- end }}
{{- end -}}

{{/* The trainer pod's spec around its container. */}}
{{- define "gradex.trainerPodSpec" -}}
{{- $root := .root -}}
{{- $w := $root.Values.workload -}}
serviceAccountName: {{ include "gradex.serviceAccountName" $root }}
automountServiceAccountToken: false
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $w.podSecurityContext | nindent 2 }}
containers:
  {{- include "gradex.trainerContainer" . | nindent 2 }}
volumes:
  - name: token
    secret:
      secretName: {{ include "gradex.tokenSecretName" $root }}
      defaultMode: 288  # 0440
  {{- if $root.Values.tls.enabled }}
  - name: tls
    secret:
      secretName: {{ $root.Values.tls.secretName }}
      items: [{key: ca.crt, path: ca.crt}]
  {{- if $root.Values.tls.clientAuth }}
  - name: tls-client
    secret:
      secretName: {{ $root.Values.tls.clientSecretName }}
      defaultMode: 288  # 0440
  {{- end }}
  {{- end }}
{{- $nodeSelector := deepCopy (default (dict) $w.nodeSelector) }}
{{- $tolerations := default (list) $w.tolerations }}
{{- if $w.gpusPerPod }}
{{- $nodeSelector = merge $nodeSelector (default (dict) $w.gpuNodeSelector) }}
{{- $tolerations = concat $tolerations (default (list) $w.gpuTolerations) }}
{{- end }}
{{- with $nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $w.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Labels and annotations of a trainer pod. */}}
{{- define "gradex.trainerPodMeta" -}}
labels:
  {{- include "gradex.labels" . | nindent 2 }}
  app.kubernetes.io/component: trainer
  {{- with .Values.workload.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.workload.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
