#!/usr/bin/env bash
# podman kube play of the rendered workloads (kube_play.py), with
# CONTAINERS_CONF defaulting to deploy/containers.conf.
# usage: kube_play.sh HELMRENDER CHART WORKDIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$HERE/../../deploy/containers.conf}
exec python3 "$HERE/kube_play.py" "$@"
