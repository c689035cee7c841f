"""What one connection's pairing holds back, by capture time
(kdissect.conn.pairing tells when): Produce requests with acks=0, which expect
no response but may get one, and responses seen before their request.

Both hold in arrival order (OrderedDicts: the oldest is found in O(1)
however many went before) and start as the shared empty `NOTHING_HELD`,
made when first written: most connections never hold either.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Iterator

from kdissect.model.exchange import Exchange
from kdissect.conn.framing import Frame
from kdissect.conn.pairing_stats import PairingStats

# never written: each holder makes its own OrderedDict when it first holds
NOTHING_HELD: OrderedDict = OrderedDict()
MAX_UNANSWERED = 100_000  # acks=0 requests held per connection
MAX_EARLY = 4096  # responses held per connection waiting for their request
EARLY_WINDOW_NS = 1_000_000_000


class Acks0Holds:
    """acks=0 requests, held until a response to a later request, the
    broker's side passing their timeout, or the connection's end shows that
    none is coming; then `release` emits them. At most MAX_UNANSWERED: past
    that the oldest is released and counted (`acks0_released`)."""

    __slots__ = ("stats", "release", "held")

    def __init__(self, stats: PairingStats, release: Callable[[Exchange], None]) -> None:
        self.stats = stats
        self.release = release
        self.held: OrderedDict[int, tuple[Exchange, int]] = NOTHING_HELD  # cid -> (exchange, release time ns)

    def __contains__(self, cid: int) -> bool:
        return cid in self.held

    def hold(self, ex: Exchange, cid: int, until: int) -> None:
        """Hold an acks=0 request until capture time `until` (ns)."""
        self.stats.acks0_requests += 1
        earlier = self.held.pop(cid, None)
        if earlier is not None:
            self.release(earlier[0])
        if self.held is NOTHING_HELD:
            self.held = OrderedDict()
        self.held[cid] = (ex, until)
        if len(self.held) > MAX_UNANSWERED:
            self.stats.acks0_released += 1
            self.release(self.held.pop(next(iter(self.held)))[0])

    def answered(self, cid: int) -> Exchange | None:
        """The held request a response answers, taken out (counted and
        noted: it asked for none), or None."""
        held = self.held.pop(cid, None)
        if held is None:
            return None
        self.stats.acks0_answered += 1
        held[0].add_problem("response-to-acks0", "response to a request that asked for none (acks=0)")
        return held[0]

    def release_before(self, request_offset: int | None) -> None:
        """A response came for the request at `request_offset`: acks=0
        requests sent before it will not get one (answers come in order)."""
        if request_offset is None:
            return
        held = self.held
        while held:
            cid = next(iter(held))
            ex = held[cid][0]
            if ex.request_offset is None or ex.request_offset >= request_offset:
                return
            del held[cid]
            self.release(ex)

    def expire(self, now: int) -> None:
        """The broker's side has reached capture time `now`: acks=0 requests
        whose timeout has passed by then will not be answered."""
        held = self.held
        while held:
            cid = next(iter(held))
            ex, until = held[cid]
            if until > now:
                break
            del held[cid]
            self.stats.acks0_released += 1
            self.release(ex)

    def release_all(self) -> None:
        for ex, _ in self.held.values():
            self.release(ex)
        self.held.clear()


class EarlyResponses:
    """Responses whose request has not been seen (yet), held until the
    client's side is EARLY_WINDOW_NS past them; then `orphan` emits them.
    At most MAX_EARLY: past that the oldest goes first."""

    __slots__ = ("stats", "orphan", "held")

    def __init__(self, stats: PairingStats, orphan: Callable[[Frame], None]) -> None:
        self.stats = stats
        self.orphan = orphan
        self.held: OrderedDict[int, Frame] = NOTHING_HELD

    def hold(self, cid: int, frame: Frame) -> None:
        held = self.held
        if held is NOTHING_HELD:
            held = self.held = OrderedDict()
        elif cid in held:
            self.orphan(held.pop(cid))
        self.stats.early_responses += 1
        held[cid] = frame
        if len(held) > MAX_EARLY:
            self.orphan(held.pop(next(iter(held))))

    def take(self, cid: int) -> Frame | None:
        """The held response to `cid`, taken out, or None."""
        return self.held.pop(cid, None) if self.held else None

    def after(self, offset: int) -> Iterator[tuple[int, Frame]]:
        """(cid, frame) of the held responses after stream offset `offset`, in stream order."""
        return iter(sorted(((cid, f) for cid, f in self.held.items() if f.offset > offset),
                           key=lambda item: item[1].offset))

    def drop(self, cid: int) -> None:
        """Forget a held response that turned out not to be one (uncounts it)."""
        del self.held[cid]
        self.stats.early_responses -= 1

    def expire(self, now: int, spare: int | None = None) -> None:
        """The client's side has reached capture time `now`: a response held
        since well before then will not see its request. (Measured on the
        client's side: while its bytes wait behind a hole, nothing expires.)
        The response to `spare` (the request being read) is kept whatever its
        time: in a capture whose times go backwards where packets were
        reordered, the segment that completed a held response can be stamped
        well before its request."""
        held = self.held
        kept = held.pop(spare, None) if spare is not None else None
        while held:
            cid = next(iter(held))
            if held[cid].ts + EARLY_WINDOW_NS > now:
                break
            self.orphan(held.pop(cid))
        if kept is not None:
            held[spare] = kept  # type: ignore[index]
            held.move_to_end(spare, last=False)  # type: ignore[arg-type]

    def release_all(self) -> None:
        for frame in self.held.values():
            self.orphan(frame)
        self.held.clear()
