# One verified page across runs and machines (docs/report.md). `make report` audits every
# manifest under manifests/ (or RUNS="run dirs or manifests ...") and writes the page to O;
# FORMAT=br0.2.1 writes their Benchmark Report v0.2.1 documents there instead.
RUNS ?=
FORMAT ?=
O    ?= runs/report

.PHONY: report

report: setup ## audit runs, then one static page comparing them + report.json + report.md (RUNS=..., O=runs/report, FORMAT=br0.2.1)
	@if [ -z "$(RUNS)" ] && [ -z "$$(find manifests -name '*.intoto.json' -print -quit 2>/dev/null)" ]; then \
	  echo "report: no signed manifests under manifests/ yet (a bench-NN, mech-NAME or cuda-NAME target writes one per run)"; \
	else \
	  $(INFKIT) report $(or $(RUNS),manifests) -o '$(O)' $(if $(TRUST),--trust $(TRUST)) $(if $(FORMAT),--format $(FORMAT)); \
	fi

# Reference runs (docs/benches.md "Reference runs"): `make reference RUN=runs/69/<run_id>` publishes a signed run's
# small files under benchmarks/results (infkit excerpt); `make docs` regenerates every page's reference-run block and
# benchmarks/results/report from them (CHECK=1: exit 1 naming what is out of date, as the tests do).
.PHONY: reference docs
reference: setup ## publish a signed run's excerpt as its bench's reference run (RUN=runs/NN/<run_id>), then make docs
	@test -n "$(RUN)" || { echo "reference: RUN=runs/NN/<run_id> names the signed run to publish"; exit 2; }
	$(INFKIT) excerpt '$(RUN)' -o benchmarks/results
	$(BIN)/python -m harness.report.reference

docs: setup ## regenerate the reference-run blocks of docs/bench-NN.md and benchmarks/results/report (CHECK=1 only checks)
	$(BIN)/python -m harness.report.reference $(if $(filter 1,$(CHECK)),--check)
