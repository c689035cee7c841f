"""`kdissect topics CAPTURE...`: who writes what where, and who is behind.

Tables (kdissect.forensics.tables): `topics` (one row per topic, partition,
direction and client id), `topic_lag` (consumer lag per minute) and
`end_to_end` (produce-to-fetch latency per topic and consumer client).
"""

from __future__ import annotations

from kdissect.commands.forensics_common import ForensicOptions, run_forensics
from kdissect.shared.options import click_command, option


class TopicsOptions(ForensicOptions):
    """Per topic-partition traffic, offsets and lag; end-to-end latency (--table topics|topic_lag|end_to_end)."""

    topics: tuple[str, ...] = option("-t", "--topic", multiple=True, help="Only rows of this topic (repeatable).")


def topics(options: TopicsOptions) -> None:
    run_forensics(options, "topics")


command = click_command("topics", TopicsOptions, topics)
