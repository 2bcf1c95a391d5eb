# CUDA mechanism experiments (INF-CUDA-MECHANISM): `make cuda-NAME [DEVICE=cpu|cuda] [CUDA_ARGS=...]`.
# On a machine without a GPU they run on CPU and record the fallback honestly. Each run is signed when it
# ends; RUNTIME=docker runs it inside the inf-cuda-mechanism image (GPU=N as a device request) and signs it
# on the host when the container exits. Any knob of `infkit cuda NAME --help` is also a Make variable
# (ITERS=5 BATCHES=1,2 ...).

TORCH_STAMP := $(VENV)/.installed-torch
DEVICE      ?= auto
CUDA_ARGS   ?=
CUDA_EXPERIMENTS := attention dispatch budget proposal overlap

.PHONY: setup-torch cuda-all $(addprefix cuda-,$(CUDA_EXPERIMENTS))

setup-torch: $(TORCH_STAMP) ## install the torch extra (torch 2.13 CPU wheel, transformers) into .venv

# Rebuilt when .venv is (the base stamp is newer) or when pyproject.toml changes.
$(TORCH_STAMP): $(STAMP) pyproject.toml
	set -o pipefail; $(BIN)/pip install -q -e '.[$(EXTRAS),torch]' 2>&1 | { grep -v 'is ignored: it is neither' || true; }
	touch $@

cuda-attention: ## explicit attention vs SDPA backends (DEVICE=auto|cpu|cuda, CUDA_ARGS=...)
cuda-dispatch: ## eager vs torch.compile on a Llama decoder block
cuda-budget: ## batch x context sweep: step latency, KV bytes, OOM boundary, inflection
cuda-proposal: ## assisted generation schedules and prompt lookup vs target-only (SmolLM2)
cuda-overlap: ## serial vs CUDA-stream overlapped copies (capability precheck on CPU)

$(addprefix cuda-,$(CUDA_EXPERIMENTS)): cuda-%: setup setup-torch
	$(call harness,inf-cuda-mechanism,runs/cuda,cuda $* --out $(abspath runs/cuda) --device $(DEVICE) --make-vars '$(MAKEOVERRIDES)' $(CUDA_ARGS))

cuda-all: $(addprefix cuda-,$(CUDA_EXPERIMENTS)) ## run every CUDA mechanism experiment
