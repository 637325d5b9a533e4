{{/* Parameter-server (DGS) pieces: the job config's ps block, its checks, the server pods' names. */}}

{{/* "true" when the job is a parameter-server job (job.algorithm dgs). */}}
{{- define "gradex.psJob" -}}
{{- if eq .Values.job.algorithm "dgs" }}true{{ end -}}
{{- end -}}

{{/* "true" when the chart runs dedicated server pods. */}}
{{- define "gradex.psServers" -}}
{{- if and (include "gradex.psJob" .) .Values.psServers.enabled }}true{{ end -}}
{{- end -}}

{{- define "gradex.psServerName" -}}
{{- printf "%s-ps-server" (include "gradex.fullname" .) -}}
{{- end -}}

{{/* The `ps` block of gradex.v1.PsConfig, as a dict (configmap.yaml). */}}
{{- define "gradex.psConfig" -}}
{{- $p := .Values.job.ps -}}
{{- $sizes := $p.layerSizes -}}
{{- if not $sizes -}}
{{- /* The DGS example's MLP (examples/train_fashion_mnist.py: 784 inputs,
workload.example.hidden, 10 classes) as DGSOptimizer lists its parameters:
each Linear's weight (in x out), then its bias (out). */ -}}
{{- $sizes = list -}}
{{- $in := 784 -}}
{{- range $h := append (deepCopy .Values.workload.example.hidden) 10 -}}
{{- $sizes = append $sizes (mul $in (int64 $h)) -}}
{{- $sizes = append $sizes (int64 $h) -}}
{{- $in = int64 $h -}}
{{- end -}}
{{- end -}}
{{- $servers := ternary (int .Values.psServers.replicas) 1 .Values.psServers.enabled -}}
{{- $shards := int $p.serverShards -}}
{{- if eq $shards 0 }}{{ $shards = $servers }}{{ end -}}
{{- $cfg := dict "servers" $servers "server_shards" $shards "max_staleness" (int64 $p.maxStaleness) "snapshot_interval_ms" (int64 $p.snapshotIntervalMs) "layer_sizes" $sizes -}}
{{- toJson $cfg -}}
{{- end -}}

{{/* Cross-field checks of a parameter-server job (gradex.validate calls it). */}}
{{- define "gradex.validatePs" -}}
{{- $ps := .Values.job.ps -}}
{{- if and .Values.psServers.enabled (not (include "gradex.psJob" .)) -}}
{{- fail (printf "psServers.enabled needs job.algorithm dgs (a parameter-server job), not %s" .Values.job.algorithm) -}}
{{- end -}}
{{- if include "gradex.psJob" . -}}
{{- if and (not $ps.layerSizes) .Values.workload.enabled .Values.workload.command -}}
{{- fail "job.ps.layerSizes is required with your own trainer command (the model's parameter sizes in order: DGSOptimizer(...).layer_sizes)" -}}
{{- end -}}
{{- if and (not $ps.layerSizes) (not .Values.workload.enabled) -}}
{{- fail "job.ps.layerSizes is required without the example workload (the model's parameter sizes in order: DGSOptimizer(...).layer_sizes)" -}}
{{- end -}}
{{- $total := 0 -}}
{{- range $ps.layerSizes }}{{ $total = add $total (int64 .) }}{{ end -}}
{{- if ge (int64 $total) 4294967296 -}}
{{- fail (printf "job.ps.layerSizes: %d parameters in all; at most 4294967295" (int64 $total)) -}}
{{- end -}}
{{- if and (gt (int64 $ps.maxStaleness) 0) (lt (int64 $ps.maxStaleness) (sub (int64 .Values.job.worldSize) 1)) -}}
{{- fail (printf "job.ps.maxStaleness (%d) must be 0 (unbounded) or at least job.worldSize - 1 (%d)" (int64 $ps.maxStaleness) (sub (int64 .Values.job.worldSize) 1)) -}}
{{- end -}}
{{- if and .Values.psServers.enabled .Values.tls.clientAuth (not .Values.tls.clientSecretName) -}}
{{- fail "tls.clientAuth with psServers needs tls.clientSecretName (the servers present the trainers' client certificate)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
