# infkit front door. Every target that runs harness code depends on `setup`,
# so a fresh machine needs no other step.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXTRAS  ?= dev,plots,docker
INFKIT  := $(BIN)/infkit
TESTS   ?=
PYTEST_ARGS ?=
GPU     ?=
RUNTIME ?=
BACKEND ?=
SCALE   ?= 1

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help setup test test-fast lint validate fingerprint clean

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_%-]+:.*?## ' $(MAKEFILE_LIST) | sort | \
	  awk 'BEGIN {FS = ":.*?## "}; {printf "  %-18s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv (rebuilt when pyproject.toml changes)

$(STAMP): pyproject.toml
	rm -rf $(VENV)
	$(PY) -m venv $(VENV)
	set -o pipefail; $(BIN)/pip install -q -e '.[$(EXTRAS)]' 2>&1 | { grep -v 'is ignored: it is neither' || true; }
	touch $@

# Without TESTS the suite runs in two parts: every test that starts no engine server and no measured container,
# spread over the cores (pytest-xdist, WORKERS of them, a file's tests on one worker); then the server and container
# tests one at a time, since each server takes every core. Both parts run; either failing fails the target.
WORKERS ?= auto
XDIST   := -n $(WORKERS) --dist loadfile
BESIDE  := (not slow and not docker) or serverless

test: setup ## run the test suite (TESTS=path-or-nodeid to filter, PYTEST_ARGS=..., WORKERS=auto|N for the first part)
ifeq ($(strip $(TESTS)),)
	@rc=0; \
	$(BIN)/python -m pytest -m "$(BESIDE)" $(XDIST) $(PYTEST_ARGS) || rc=1; \
	$(BIN)/python -m pytest -m "not ($(BESIDE))" $(PYTEST_ARGS) || rc=1; \
	exit $$rc
else
	$(BIN)/python -m pytest $(TESTS) $(PYTEST_ARGS)
endif

test-fast: setup ## tests without the slow (real server) and docker markers, spread over the cores (WORKERS=auto|N)
	$(BIN)/python -m pytest -m "not slow and not docker and not gpu" $(XDIST) $(TESTS) $(PYTEST_ARGS)

lint: setup ## ruff (line length 120) over the package, tests and benchmarks; mypy over bench, serving, contract
	$(BIN)/ruff check harness tests benchmarks
	$(BIN)/mypy

validate: setup ## validate the example documents (FILES=... to choose)
	$(INFKIT) validate $(or $(FILES),tests/examples/valid/*.json)

fingerprint: setup ## print this machine's environment fingerprint as JSON
	$(INFKIT) fingerprint --json

clean: ## remove the venvs, caches and run outputs (keeps manifests/ and keys)
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info runs
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# $(call harness,ROLE,RUN_ROOT,ARGS): an infkit command here, or inside ROLE's pinned image when
# RUNTIME=docker (harness mounted read-only, RUN_ROOT read-write, GPU=N as a device request).
harness = $(if $(filter docker,$(RUNTIME)),mkdir -p $(2) && $(INFKIT) images run --run-dir $(abspath $(2)) $(if $(GPU),--gpu $(GPU)) $(1),$(INFKIT)) $(3)

# Each concern adds its targets in its own file.
-include mk/*.mk
