"""Where the checkout is, for tests at any depth under tests/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "captures"
