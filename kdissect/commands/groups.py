"""`kdissect groups CAPTURE...`: the consumer-group timeline.

Tables (kdissect.forensics.tables): `groups` (one row per group generation:
classic generations, KIP-848 consumer and share group epochs),
`group_commits` (committed offsets and their lag), `group_lag` (per group
and partition at the capture's end: committed offset, high watermark, lag,
owner), `share_groups` (share
group record delivery per partition) and `share_group_members` (share group
members: partitions, acknowledgements, heartbeats, share sessions).
"""

from __future__ import annotations

from kdissect.commands.forensics_common import ForensicOptions, run_forensics
from kdissect.shared.options import click_command


class GroupsOptions(ForensicOptions):
    """One row per group generation: members, assignments, rebalance times, errors,
    commits (--table groups|group_commits|group_lag|share_groups|share_group_members)."""


def groups(options: GroupsOptions) -> None:
    run_forensics(options, "groups")


command = click_command("groups", GroupsOptions, groups)
