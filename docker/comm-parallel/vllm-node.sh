#!/bin/sh
# Start a follower of vLLM's own multi-node launcher (mp backend, no Ray): the engine's workers for
# NODE_RANK > 0, headless (no API server). Node 0 is the bench's head:
#   on node 0: make bench-81 NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 GPU=0
#   on node 1: NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 MODEL_DIR=/models/m docker/comm-parallel/vllm-node.sh
# The follower runs the head's engine flags: pipeline parallel NNODES (one stage per node), tensor parallel
# TP_PER_NODE (default 1). Settings: NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT (29500), MODEL_DIR (same
# path on every node), DTYPE and MAX_MODEL_LEN (as the bench's: bfloat16, 4096), SERVED_NAME (the bench's model name, default smollm2-135m), IFNAME (NCCL/Gloo
# interface), IMAGE, GPUS (docker --gpus, default all), EXTRA_ARGS. DRY_RUN=1 prints the command instead.
# vLLM's --nnodes/--node-rank/--master-addr launcher arrived after vLLM 0.11.0 (the pinned GPU image):
# set IMAGE to a vLLM image that has it; on 0.11.0 the engine refuses the flags.
set -eu
: "${NNODES:?set NNODES (the number of nodes)}" "${NODE_RANK:?set NODE_RANK (this node, 1..NNODES-1)}"
: "${MASTER_ADDR:?set MASTER_ADDR to node 0 address}" "${MODEL_DIR:?set MODEL_DIR to the model directory}"
if [ "$NODE_RANK" -lt 1 ] || [ "$NODE_RANK" -ge "$NNODES" ]; then
  echo "NODE_RANK must be 1..$((NNODES - 1)) here; node 0 is the bench: make bench-81 NNODES=$NNODES NODE_RANK=0 MASTER_ADDR=$MASTER_ADDR" >&2
  exit 2
fi
IMAGE=${IMAGE:-docker.io/vllm/vllm-openai:v0.11.0@sha256:014a95f21c9edf6abe0aea6b07353f96baa4ec291c427bb1176dc7c93a85845c}
set -- docker run --rm --name "infkit-vllm-node$NODE_RANK" --network host --ipc host --shm-size 16g \
  --gpus "${GPUS:-all}" -e NCCL_DEBUG="${NCCL_DEBUG:-WARN}" -e HF_HUB_OFFLINE=1 -v "$MODEL_DIR:$MODEL_DIR:ro"
if [ -n "${IFNAME:-}" ]; then
  set -- "$@" -e NCCL_SOCKET_IFNAME="$IFNAME" -e GLOO_SOCKET_IFNAME="$IFNAME" -e TP_SOCKET_IFNAME="$IFNAME"
fi
# shellcheck disable=SC2086 # EXTRA_ARGS is a list of flags
set -- "$@" --entrypoint vllm "$IMAGE" serve "$MODEL_DIR" --served-model-name "${SERVED_NAME:-smollm2-135m}" \
  --dtype "${DTYPE:-bfloat16}" --max-model-len "${MAX_MODEL_LEN:-4096}" --seed 0 \
  --pipeline-parallel-size "$NNODES" --tensor-parallel-size "${TP_PER_NODE:-1}" \
  --nnodes "$NNODES" --node-rank "$NODE_RANK" --master-addr "$MASTER_ADDR" --master-port "${MASTER_PORT:-29500}" \
  --headless ${EXTRA_ARGS:-}
if [ "${DRY_RUN:-0}" = 1 ]; then echo "$@"; exit 0; fi
exec "$@"
