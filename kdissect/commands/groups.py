"""`kdissect groups CAPTURE...`: the consumer-group timeline.

Tables (kdissect.forensics.tables): `groups` (one row per group generation:
classic generations, KIP-848 consumer and share group epochs) and
`group_commits` (committed offsets and their lag).
"""

from __future__ import annotations

from kdissect.commands.forensics_common import ForensicOptions, run_forensics
from kdissect.options import click_command


class GroupsOptions(ForensicOptions):
    """One row per group generation: members, assignments, rebalance times, errors,
    commits (--table groups|group_commits)."""


def groups(options: GroupsOptions) -> None:
    run_forensics(options, "groups")


command = click_command("groups", GroupsOptions, groups)
