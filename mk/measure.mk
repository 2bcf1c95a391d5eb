# Serving measurement: workloads, streaming client, metrics, server telemetry.
.PHONY: test-measure client-overhead

MEASURE_TESTS := tests/test_workload.py tests/test_client.py tests/test_metrics.py tests/test_telemetry.py tests/test_serving.py

test-measure: setup ## tests of workloads, the streaming client, metrics, telemetry and serving.measure
	$(BIN)/python -m pytest $(MEASURE_TESTS) $(PYTEST_ARGS)

client-overhead: setup ## benchmark: client cost against a fake server at 1..1024 streams (prints figures)
	$(BIN)/python benchmarks/client_overhead.py $(ARGS)
