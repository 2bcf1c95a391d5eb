# shellcheck shell=bash
# Sourced by .ci/run before `make test`: a Docker-API engine for the `docker`-marked tests.
#
# Machines of this kind have the docker client but no engine and no registry, so
# rootful podman serves the Docker Engine API on a private unix socket, with a
# private store and containers.conf (runc; ulimits the sandbox allows). The base
# image is made from the machine's own Debian mirror (debootstrap → podman import).
# Idempotent: a second run reuses the tools, the store, the base image and a live
# service. Exports DOCKER_HOST, CONTAINERS_CONF, CONTAINERS_STORAGE_CONF,
# INFKIT_CONTAINER_ENGINE, INFKIT_LOCAL_BASE_IMAGE and INFKIT_REQUIRE_DOCKER=1.

_infkit_setup_docker() {
  local dir=${INFKIT_PODMAN_DIR:-/var/tmp/infkit-podman}
  local base=${INFKIT_LOCAL_BASE_IMAGE:-localhost/infkit/debian-bookworm-minbase:local}
  local sock="$dir/podman.sock" t0=$SECONDS
  mkdir -p "$dir"

  if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >"$dir/apt.log" 2>&1
    apt-get install -y -q --no-install-recommends podman runc debootstrap ca-certificates >>"$dir/apt.log" 2>&1 || {
      echo "[ci] installing podman failed; see $dir/apt.log" >&2
      return 1
    }
  fi

  # crun rejects the hybrid cgroup layout here and CAP_SYS_RESOURCE is missing: runc + fixed ulimits.
  cat >"$dir/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
  cat >"$dir/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$dir/storage"
runroot = "$dir/run"
CONF
  export CONTAINERS_CONF="$dir/containers.conf" CONTAINERS_STORAGE_CONF="$dir/storage.conf"

  if ! podman image exists "$base"; then
    local mirror rootfs="$dir/rootfs"
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "${mirror:-http://deb.debian.org/debian}" >"$dir/debootstrap.log" 2>&1 || {
      echo "[ci] debootstrap failed; see $dir/debootstrap.log" >&2
      return 1
    }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    if [ -s /etc/apt/sources.list.d/debian.sources ]; then
      # the host's suites (updates + security) in deb822 form replace the single-suite sources.list
      rm -f "$rootfs/etc/apt/sources.list"
      sed -e '/^#/d' /etc/apt/sources.list.d/debian.sources >"$rootfs/etc/apt/sources.list.d/debian.sources"
    fi
    tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >>"$dir/debootstrap.log" 2>&1
    rm -rf "$rootfs"
  fi
  echo "[ci] podman and base image $base ready after $((SECONDS - t0))s"

  if ! curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
    rm -f "$sock"
    podman system service --time=0 "unix://$sock" >"$dir/service.log" 2>&1 &
    INFKIT_PODMAN_SERVICE_PID=$!
    local i
    for i in $(seq 1 100); do
      curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1 && break
      sleep 0.1
    done
    if ! curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
      echo "[ci] podman API service did not answer; see $dir/service.log" >&2
      return 1
    fi
    # stop the service with the CI shell, keeping any EXIT trap set before us
    local prev
    prev=$(trap -p EXIT | sed -e "s/^trap -- '//" -e "s/' EXIT\$//")
    # shellcheck disable=SC2064
    trap "kill $INFKIT_PODMAN_SERVICE_PID 2>/dev/null || true; ${prev:-:}" EXIT
  fi
  export DOCKER_HOST="unix://$sock" INFKIT_CONTAINER_ENGINE=podman
  export INFKIT_LOCAL_BASE_IMAGE="$base" INFKIT_REQUIRE_DOCKER=1
  echo "[ci] Docker API at $DOCKER_HOST after $((SECONDS - t0))s"
}

_infkit_setup_docker
