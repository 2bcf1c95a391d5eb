"""CPU package energy from RAPL (``/sys/class/powercap/intel-rapl:N/energy_uj``) during a measured run.

Each top-level package zone (``intel-rapl:N``, named ``package-N``) counts microjoules and wraps to zero past its
``max_energy_range_uj``. ``RaplMeter`` reads every package at the start, every ``interval_s`` while the run goes on
(often enough to see each wrap: a package wraps after hundreds of kJ) and at the stop, adding each step's delta with
the wrap taken into account. Sub-zones (core, uncore, dram) lie inside their package and ``psys`` spans the
platform, so only packages are summed. A host without the tree, or whose counters only root may read, is
``missing`` with the reason.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.telemetry.periodic import Periodic

POWERCAP = Path("/sys/class/powercap")
SOURCE = "rapl_energy_uj"


@dataclass
class _Zone:
    path: Path
    name: str
    max_uj: int
    last_uj: int
    total_uj: int = 0
    wraps: int = 0

    def advance(self) -> None:
        now = int((self.path / "energy_uj").read_text())
        if now < self.last_uj:  # wrapped past max_energy_range_uj back to zero
            self.total_uj += self.max_uj - self.last_uj + now
            self.wraps += 1
        else:
            self.total_uj += now - self.last_uj
        self.last_uj = now


def package_zones(root: Path = POWERCAP) -> tuple[list[_Zone], str | None]:
    """The readable package zones under ``root``, or ([], the reason there are none)."""
    if not root.is_dir():
        return [], f"{root} does not exist: this host exposes no RAPL energy counters"
    dirs = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
    zones = []
    try:
        for d in dirs:
            name = (d / "name").read_text().strip() if (d / "name").exists() else d.name
            if not name.startswith("package"):
                continue  # psys spans the whole platform and would count the packages twice
            zones.append(_Zone(d, name, int((d / "max_energy_range_uj").read_text()),
                               int((d / "energy_uj").read_text())))
    except PermissionError as exc:
        return [], f"{exc.filename}: only root may read the RAPL counters on this host"
    except (OSError, ValueError) as exc:
        return [], f"the RAPL counters under {root} cannot be read: {exc}"
    if not zones:
        return [], f"{root} has no intel-rapl package zone: this host exposes no RAPL package energy"
    return zones, None


@dataclass
class RaplMeter:
    """Package energy from ``start`` to ``stop``; ``stop`` returns the reading or ``{"missing": reason}``."""

    root: Path = POWERCAP
    interval_s: float = 1.0
    _zones: list[_Zone] = field(default_factory=list)
    _missing: str | None = None
    _failures: int = 0
    _t0: float = 0.0
    _loop: Periodic | None = None

    def start(self) -> RaplMeter:
        self._zones, self._missing = package_zones(Path(self.root))
        self._t0 = time.monotonic()
        if self._zones:
            self._loop = Periodic(self._advance, self.interval_s, "infkit-rapl", first=False).start()
        return self

    def _advance(self) -> None:
        for zone in self._zones:
            try:
                zone.advance()
            except (OSError, ValueError):
                self._failures += 1

    def stop(self) -> dict[str, Any]:
        if not self._zones:
            return {"missing": self._missing or "no RAPL package zone was read"}
        if self._loop is not None:
            self._loop.stop()
        self._advance()
        window_s = time.monotonic() - self._t0
        return {
            "source": SOURCE,
            "interval_s": self.interval_s,
            "window_s": round(window_s, 3),
            "energy_j": round(sum(z.total_uj for z in self._zones) / 1e6, 3),
            "failed_reads": self._failures,
            "domains": [{"zone": z.path.name, "name": z.name, "energy_j": round(z.total_uj / 1e6, 3),
                         "wraps": z.wraps} for z in self._zones],
        }
