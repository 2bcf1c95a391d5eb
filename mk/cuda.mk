# CUDA mechanism experiments (INF-CUDA-MECHANISM): `make cuda-NAME [DEVICE=cpu|cuda] [CUDA_ARGS=...]`.
# On a machine without a GPU they run on CPU and record the fallback honestly. Each run is signed when it
# ends; RUNTIME=docker runs it inside the inf-cuda-mechanism image (GPU=N as a device request) and signs it
# on the host when the container exits. Any knob of `infkit cuda NAME --help-all` is also a Make variable
# (ITERS=5 BATCHES=1,2 ...).

TORCH_STAMP := $(VENV)/.installed-torch
DEVICE      ?= auto
CUDA_ARGS   ?=
# The experiments are the registry's (harness.cuda: a module exporting EXPERIMENT), asked when a recipe needs them.
CUDA_EXPERIMENTS = $(shell $(BIN)/python -c 'from harness.cuda.registry import experiments; print(*experiments())')

.PHONY: setup-torch cuda-all cudas

setup-torch: $(TORCH_STAMP) ## install the torch extra (torch 2.13 CPU wheel, transformers) into .venv

# Rebuilt when .venv is (the base stamp is newer) or when pyproject.toml changes.
$(TORCH_STAMP): $(STAMP) pyproject.toml
	set -o pipefail; $(BIN)/pip install -q -e '.[$(EXTRAS),torch]' 2>&1 | { grep -v 'is ignored: it is neither' || true; }
	touch $@

cudas: setup ## list the CUDA experiments (make cuda-NAME runs one; infkit cuda NAME --help lists its knobs, --help-all every one)
	@$(INFKIT) cuda --help | sed -n '/^positional/,/^options/p' | sed '1d;$$d'

cuda-%: setup setup-torch ## run CUDA experiment NAME (make cudas lists them; DEVICE=auto|cpu|cuda, CUDA_ARGS=...)
	$(call harness,inf-cuda-mechanism,runs/cuda,cuda $* --out $(abspath runs/cuda) --device $(DEVICE) --make-vars '$(MAKEOVERRIDES)' $(CUDA_ARGS))

cuda-all: setup setup-torch ## run every CUDA mechanism experiment
	set -e; for e in $(CUDA_EXPERIMENTS); do $(MAKE) --no-print-directory cuda-$$e; done
