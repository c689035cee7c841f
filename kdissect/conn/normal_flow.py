"""Error codes the Kafka protocol uses for its normal flow, not for failures.

Some error codes are how the protocol steers a healthy client: a broker
answers a new group member with MEMBER_ID_REQUIRED on purpose, a rebalance
is announced through REBALANCE_IN_PROGRESS, and so on. Counted together with
real failures they drown them, so every table that counts errors marks each
code with `normal_flow` (kdissect.stats.summary, the report's heatmap).

The list is data: (name, why it is normal, where the protocol says so). It
was decided from the protocol guide (kafka.apache.org/protocol, "Error
Codes") and the KIPs named. Codes that are normal only in some situations
are listed when that situation is the usual one; codes that mean a client
lost something (UNKNOWN_MEMBER_ID: the member was expelled, usually after
missing its session timeout; ILLEGAL_GENERATION, FENCED_MEMBER_EPOCH) or a
leader is unavailable for clients (NOT_LEADER_OR_FOLLOWER) stay failures.
"""

from __future__ import annotations

# (error name, why it is part of the normal flow, source)
NORMAL_FLOW: tuple[tuple[str, str, str], ...] = (
    ("MEMBER_ID_REQUIRED",
     "a new member's first JoinGroup is answered with its member id, and the member joins again with it",
     "KIP-394"),
    ("REBALANCE_IN_PROGRESS",
     "how the group coordinator tells members (Heartbeat, SyncGroup, OffsetCommit) to rejoin for a rebalance",
     "Kafka protocol guide, group membership; KIP-62"),
    ("NOT_COORDINATOR",
     "the group or transaction coordinator moved; the client finds the new one with FindCoordinator",
     "Kafka protocol guide, error codes (retriable)"),
    ("COORDINATOR_LOAD_IN_PROGRESS",
     "a coordinator that just took over is still loading its state; the client retries",
     "Kafka protocol guide, error codes (retriable)"),
    ("FETCH_SESSION_ID_NOT_FOUND",
     "the broker dropped an incremental fetch session from its cache; the client opens a new full one",
     "KIP-227"),
    ("OFFSET_MOVED_TO_TIERED_STORAGE",
     "a replica fetching offsets that moved to remote storage is told to rebuild from it",
     "KIP-405"),
    ("UNSTABLE_OFFSET_COMMIT",
     "a stable OffsetFetch waits for pending transactional commits; the client retries",
     "KIP-447"),
    ("LEADER_NOT_AVAILABLE",
     "a topic just created (or auto-created by Metadata) has no leader yet; the client asks again",
     "Kafka protocol guide, error codes (retriable)"),
)

NORMAL_FLOW_NAMES: frozenset[str] = frozenset(name for name, _, _ in NORMAL_FLOW)


def _codes() -> frozenset[int]:
    from kdissect.protocol._generated.errors import ERRORS

    return frozenset(code for code, entry in ERRORS.items() if entry[0] in NORMAL_FLOW_NAMES)


NORMAL_FLOW_CODES: frozenset[int] = _codes()


def is_normal_flow(code: int | None) -> bool:
    """Whether a non-zero error code is one the protocol uses in its normal flow."""
    return code in NORMAL_FLOW_CODES


def is_normal_flow_name(name: str) -> bool:
    return name in NORMAL_FLOW_NAMES


def failure_codes(codes: list[int] | tuple[int, ...]) -> list[int]:
    """The codes among `codes` that are failures (non-zero, not normal flow)."""
    return [code for code in codes if code and code not in NORMAL_FLOW_CODES]
