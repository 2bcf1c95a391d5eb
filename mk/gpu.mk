# The GPU check (docs/cuda.md): every CUDA mechanism experiment plus the NVML fingerprint,
# at an H200-sized setting, runnable offline on a bare CUDA machine from one bundle.
GPU_BUNDLE ?= build/infkit-gpu-check.tar.gz

.PHONY: gpu-bundle gpu-check gpu-check-rehearsal

gpu-bundle: setup ## build/infkit-gpu-check.tar.gz: harness + wheels beyond torch (< 60 MB), runs the GPU check offline
	benchmarks/make_gpu_bundle.sh $(GPU_BUNDLE)

gpu-check: setup setup-torch ## every CUDA experiment + NVML fingerprint on this machine's GPU -> benchmarks/results/
	benchmarks/gpu_check.sh

gpu-check-rehearsal: gpu-bundle ## unpack the bundle and run its CPU rehearsal (DEVICE=cpu) with PY=<a python with torch>
	rm -rf build/gpu-bundle-rehearsal && mkdir -p build/gpu-bundle-rehearsal
	tar -C build/gpu-bundle-rehearsal -xzf $(GPU_BUNDLE)
	DEVICE=cpu build/gpu-bundle-rehearsal/infkit-gpu-check/benchmarks/gpu_check.sh
