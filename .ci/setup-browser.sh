# shellcheck shell=bash
# Sourced by .ci/run before `make test`: a real headless browser for the report page test
# (tests/report/test_browser.py opens index.html from file:// and keeps a screenshot).
#
# Debian's chromium and chromium-driver; nothing is downloaded outside the distribution.
# Idempotent: a second run finds both binaries and installs nothing. Exports
# INFKIT_CHROMIUM, INFKIT_CHROMEDRIVER and INFKIT_REQUIRE_BROWSER=1, so a missing browser
# fails the test instead of skipping it.

_infkit_setup_browser() {
  local log=${TMPDIR:-/tmp}/infkit-browser-apt.log t0=$SECONDS
  if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -q && apt-get install -y -q --no-install-recommends chromium chromium-driver fonts-dejavu-core; } \
      >"$log" 2>&1 || {
      echo "[ci] installing chromium failed; see $log" >&2
      return 1
    }
  fi
  INFKIT_CHROMIUM=$(command -v chromium)
  INFKIT_CHROMEDRIVER=$(command -v chromedriver)
  export INFKIT_CHROMIUM INFKIT_CHROMEDRIVER INFKIT_REQUIRE_BROWSER=1
  echo "[ci] browser: $("$INFKIT_CHROMIUM" --version 2>/dev/null | head -1) ($((SECONDS - t0)) s)"
}

_infkit_setup_browser
