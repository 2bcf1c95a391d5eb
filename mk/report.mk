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
