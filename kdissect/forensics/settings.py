"""The forensic tables' settings, as options: one description for `kdissect
topics|groups|clients` and the Spark job (`kdissect spark`, spark-submit)."""

from __future__ import annotations

from typing import Any

from kdissect.failures import InputError
from kdissect.options import NUMBER, CaptureInputs, integer, option


class ForensicSettings(CaptureInputs):
    max_uncompressed_mib: int = option(
        "--max-uncompressed-mib", kind=integer(1, 4096), default=64, show_default=True,
        help="Stop decompressing a batch beyond this many MiB (the batch is flagged).")
    horizon_s: float = option(
        "--e2e-horizon", kind=NUMBER, default=900.0, show_default=True, metavar="SECONDS",
        help="End-to-end latency: match a fetched record with its produce request only within this many "
             "seconds (bounds the memory the matching takes).")


def forensic_settings(options: ForensicSettings) -> dict[str, Any]:
    """`Forensics`' keyword arguments (horizon_ns, max_uncompressed) for the options."""
    if not options.horizon_s > 0:
        raise InputError("--e2e-horizon must be more than 0 seconds")
    return {"horizon_ns": int(options.horizon_s * 1e9),
            "max_uncompressed": options.max_uncompressed_mib * 1024 * 1024}
