# shellcheck shell=bash
# Sourced by .ci/run after setup-docker.sh: a Distribution registry on 127.0.0.1 for the
# `registry`-marked tests (push → lock → pull by digest → verify → run).
#
# Debian's `docker-registry` is the CNCF Distribution server (the registry API Docker Hub and
# GHCR speak); `skopeo` speaks the same protocol from the client side (the tests use it as a
# second client). The registry listens on a free loopback port with its own config and storage
# directory (a fresh /var/tmp/infkit-registry.XXXXXX, or $INFKIT_REGISTRY_DIR), plain HTTP on
# loopback only, and stops with the CI shell, its storage removed; sourced again in the same
# shell, it is reused. A private registries.conf (CONTAINERS_REGISTRIES_CONF, read by podman and
# infkit; skopeo takes it as --registries-conf) marks that one address insecure, nothing else.
# Exports INFKIT_TEST_REGISTRY=127.0.0.1:PORT, INFKIT_REGISTRY_STORAGE, CONTAINERS_REGISTRIES_CONF
# and INFKIT_REQUIRE_REGISTRY=1. Stop it by hand with `kill "$INFKIT_REGISTRY_PID"`.

_infkit_setup_registry() {
  local t0=$SECONDS port dir
  if [ -n "${INFKIT_REGISTRY_PID:-}" ] && kill -0 "$INFKIT_REGISTRY_PID" 2>/dev/null &&
    curl -sf "http://${INFKIT_TEST_REGISTRY:-}/v2/" >/dev/null 2>&1; then
    echo "[ci] registry at http://$INFKIT_TEST_REGISTRY (already running)"
    return 0
  fi
  # each CI shell gets its own directory: several runs on one machine never share a registry's storage
  dir=${INFKIT_REGISTRY_DIR:-$(mktemp -d /var/tmp/infkit-registry.XXXXXX)}
  mkdir -p "$dir/storage"
  if ! command -v docker-registry >/dev/null || ! command -v skopeo >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends docker-registry skopeo; } >"$dir/apt.log" 2>&1 || {
      echo "[ci] installing docker-registry and skopeo failed; see $dir/apt.log" >&2
      return 1
    }
  fi
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$dir/config.yml" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
CONF
  docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  INFKIT_REGISTRY_PID=$!
  local i
  for i in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
    sleep 0.1
  done
  if ! curl -sf "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then
    echo "[ci] the registry did not answer on 127.0.0.1:$port; see $dir/registry.log" >&2
    return 1
  fi
  local prev
  prev=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
  # shellcheck disable=SC2064
  trap "kill $INFKIT_REGISTRY_PID 2>/dev/null || true; rm -rf '$dir/storage'; ${prev:-:}" EXIT
  # the machine's own settings (search registries, mirrors) stay; only the loopback registry is added
  : >"$dir/registries.conf"
  if [ -r /etc/containers/registries.conf ] && ! grep -q '^\[registries\.' /etc/containers/registries.conf; then
    cat /etc/containers/registries.conf >"$dir/registries.conf"
  fi
  cat >>"$dir/registries.conf" <<CONF

[[registry]]
location = "127.0.0.1:$port"
insecure = true
CONF
  export CONTAINERS_REGISTRIES_CONF="$dir/registries.conf" INFKIT_TEST_REGISTRY="127.0.0.1:$port"
  export INFKIT_REGISTRY_STORAGE="$dir/storage" INFKIT_REGISTRY_PID INFKIT_REQUIRE_REGISTRY=1
  echo "[ci] registry at http://$INFKIT_TEST_REGISTRY after $((SECONDS - t0))s"
}

_infkit_setup_registry
