"""`kdissect export CAPTURE... [-o FILE]`: the exchange table (JSONL, CSV or Parquet)."""

from __future__ import annotations

from kdissect.commands.export_core import ExportOptions, export
from kdissect.shared.options import click_command

command = click_command("export", ExportOptions, export)
