#!/bin/sh
# Start one node of a Ray cluster for vLLM's Ray executor (make bench-81 RAY_ADDRESS=HEAD_IP:6379), in the
# serving image, so every node has the same vLLM, torch and NCCL. Run on each machine:
#   HEAD: NODE_IP=10.0.0.1 docker/comm-parallel/ray-node.sh head
#   WORKER: NODE_IP=10.0.0.2 HEAD_ADDR=10.0.0.1 docker/comm-parallel/ray-node.sh worker
# Settings (environment): NODE_IP (this node's address on the fast network), HEAD_ADDR, RAY_PORT (6379),
# IFNAME (network interface for NCCL/Gloo, e.g. ib0 or eth0), IMAGE (default: the INF-VLLM-011-CU128 base),
# MODEL_DIR (mounted read-only at the same path: the model must be at the same path on every node),
# GPUS (docker --gpus value, default all), NCCL_DEBUG (WARN). DRY_RUN=1 prints the command instead.
set -eu
role=${1:-}
case "$role" in head|worker) ;; *) echo "usage: $0 head|worker (see the header for the settings)" >&2; exit 2 ;; esac
: "${NODE_IP:?set NODE_IP to this node's address on the network the nodes share}"
RAY_PORT=${RAY_PORT:-6379}
IMAGE=${IMAGE:-docker.io/vllm/vllm-openai:v0.11.0@sha256:014a95f21c9edf6abe0aea6b07353f96baa4ec291c427bb1176dc7c93a85845c}
GPUS=${GPUS:-all}
set -- docker run --rm --name "infkit-ray-$role" --network host --ipc host --shm-size 16g --gpus "$GPUS" \
  -e VLLM_HOST_IP="$NODE_IP" -e NCCL_DEBUG="${NCCL_DEBUG:-WARN}" -e RAY_USAGE_STATS_ENABLED=0
if [ -n "${IFNAME:-}" ]; then
  set -- "$@" -e NCCL_SOCKET_IFNAME="$IFNAME" -e GLOO_SOCKET_IFNAME="$IFNAME" -e TP_SOCKET_IFNAME="$IFNAME"
fi
if [ -n "${MODEL_DIR:-}" ]; then set -- "$@" -v "$MODEL_DIR:$MODEL_DIR:ro"; fi
set -- "$@" --entrypoint ray "$IMAGE" start --block --node-ip-address "$NODE_IP"
if [ "$role" = head ]; then
  set -- "$@" --head --port "$RAY_PORT" --include-dashboard false
else
  : "${HEAD_ADDR:?set HEAD_ADDR to the head node's address}"
  set -- "$@" --address "$HEAD_ADDR:$RAY_PORT"
fi
if [ "${DRY_RUN:-0}" = 1 ]; then echo "$@"; exit 0; fi
exec "$@"
