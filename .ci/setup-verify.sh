# shellcheck shell=bash
# Sourced by .ci/run before `make test`: the standard tools docs/manifests.md's OpenSSL recipe uses
# (tests/manifest/test_manifest_verifiers.py runs it on a freshly signed run; under CI a missing tool
# fails that test instead of skipping it). Debian's packages; idempotent, usually already present.

_infkit_setup_verify() {
  local log=${TMPDIR:-/tmp}/infkit-verify-apt.log
  if ! command -v jq >/dev/null || ! command -v openssl >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends jq openssl; } >"$log" 2>&1 || {
      echo "[ci] installing jq and openssl failed; see $log" >&2
      return 1
    }
  fi
  echo "[ci] verify tools: $(openssl version), $(jq --version)"
}

_infkit_setup_verify
