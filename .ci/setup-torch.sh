# Sourced by .ci/run: the torch extra for the CUDA mechanism tests (CPU wheel here);
# with INFKIT_REQUIRE_TORCH=1 a missing torch fails those tests instead of skipping them.
make setup-torch
export INFKIT_REQUIRE_TORCH=1
