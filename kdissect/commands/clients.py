"""`kdissect clients CAPTURE...`: which client does what, and which misbehaves.

Tables (kdissect.forensics.tables): `clients` (one row per client id and
software) and `producers` (idempotent / transactional producer sequences per
partition).
"""

from __future__ import annotations

from kdissect.commands.forensics_common import ForensicOptions, run_forensics
from kdissect.shared.options import click_command


class ClientsOptions(ForensicOptions):
    """One row per client: software, hosts, connections, requests, produce batches,
    producer ids, throttling, errors (--table clients|producers)."""


def clients(options: ClientsOptions) -> None:
    run_forensics(options, "clients")


command = click_command("clients", ClientsOptions, clients)
