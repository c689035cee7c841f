"""Cheap facts about a decoded response: throttle time and error codes.

For every (api key, version) the fields holding error codes are found once
from the schema (int16 fields named ``ErrorCode`` / ``...ErrorCode``) and a
small walk plan is cached, so summarising a response only visits the
branches that can hold an error code.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kdissect.model.packet import FrozenSlotRecord
from kdissect.protocol.schema import FieldSchema, get_schema, resolve_version

__all__ = ["ResponseSummary", "summarize_response", "response_figures", "partition_errors"]

_TOPIC_NAMES = ("name", "topic_name", "topic")
# Produce and FetchSnapshot responses name the partition field "Index".
_PARTITION_NAMES = ("partition_index", "partition", "partition_id", "index")


class ResponseSummary(FrozenSlotRecord):
    __slots__ = ("throttle_time_ms", "error_code", "error_codes")

    # (the fields, for type checkers: __init__ stores them with _set_fields)
    throttle_time_ms: int | None
    error_code: int | None
    error_codes: tuple[int, ...]

    def __init__(self,
                 throttle_time_ms: int | None,  # None when the version has no ThrottleTimeMs
                 error_code: int | None,  # top-level ErrorCode, None when the version has none
                 error_codes: tuple[int, ...],  # sorted distinct non-zero codes anywhere
                 ) -> None:
        self._set_fields(throttle_time_ms, error_code, error_codes)


class _Plan:
    """Walk plan for one struct level: error attrs here, nested branches,
    and the attrs naming a topic / partition at this level."""

    __slots__ = ("codes", "branches", "topic_attrs", "topic_id_attr", "partition_attr")

    def __init__(self, fields: tuple[FieldSchema, ...]) -> None:
        self.codes = tuple(f.attr for f in fields if f.element == "int16" and not f.is_array
                           and f.name.endswith("ErrorCode"))
        branches: list[tuple[str, bool, _Plan]] = []
        for f in fields:
            if f.is_struct:
                sub = _Plan(f.fields)  # type: ignore[arg-type]
                if sub.codes or sub.branches:
                    branches.append((f.attr, f.is_array, sub))
        self.branches: tuple[tuple[str, bool, _Plan], ...] = tuple(branches)
        attrs = {f.attr: f for f in fields}
        self.topic_attrs = tuple(a for a in _TOPIC_NAMES if a in attrs and attrs[a].element == "string"
                                 and not attrs[a].is_array)
        self.topic_id_attr = "topic_id" if "topic_id" in attrs and attrs["topic_id"].element == "uuid" else None
        part = [a for a in _PARTITION_NAMES if a in attrs and attrs[a].element == "int32" and not attrs[a].is_array]
        self.partition_attr = part[0] if part else None


@lru_cache(maxsize=None)
def _plan(api_key: int, api_version: int) -> tuple[_Plan, bool, bool]:
    try:
        version, _problem = resolve_version(api_key, api_version, "response")
    except KeyError:
        version = api_version
    schema = get_schema(api_key, version, "response")
    top = {f.attr for f in schema.fields if not f.is_array}
    return _Plan(schema.fields), "throttle_time_ms" in top, "error_code" in top


def _collect(obj: Any, plan: _Plan, found: set[int]) -> None:
    for attr in plan.codes:
        code = getattr(obj, attr, 0)
        if code:
            found.add(code)
    for attr, is_array, sub in plan.branches:
        value = getattr(obj, attr, None)
        if value is None:
            continue
        if is_array:
            for item in value:
                _collect(item, sub, found)
        else:
            _collect(value, sub, found)


def _plan_for_body(api_key: int, api_version: int, body: Any) -> tuple[_Plan, bool, bool]:
    """The plan of the layout the body was decoded with (cached on its class)."""
    cls = type(body)
    fields = getattr(cls, "_schema", None)
    if fields is None:
        return _plan(api_key, api_version)
    plan = cls.__dict__.get("_summary_plan")
    if plan is None:
        top = {f.attr for f in fields if not f.is_array}
        plan = (_Plan(fields), "throttle_time_ms" in top, "error_code" in top)
        cls._summary_plan = plan
    return plan


def summarize_response(api_key: int, api_version: int, body: Any) -> ResponseSummary:
    """Throttle time, top-level error and every distinct non-zero error code."""
    throttle, error, codes = response_figures(api_key, api_version, body)
    return ResponseSummary(throttle_time_ms=throttle, error_code=error, error_codes=tuple(codes))


def response_figures(api_key: int, api_version: int, body: Any) -> tuple[int | None, int | None, list[int]]:
    """summarize_response's values as a plain tuple, the codes as a new sorted
    list (for exchange rows, without building the summary object)."""
    plan, has_throttle, has_error = _plan_for_body(api_key, api_version, body)
    found: set[int] = set()
    _collect(body, plan, found)
    return (getattr(body, "throttle_time_ms", None) if has_throttle else None,
            getattr(body, "error_code", None) if has_error else None,
            sorted(found) if found else [])


def _label(obj: Any, plan: _Plan) -> str | None:
    for attr in plan.topic_attrs:
        value = getattr(obj, attr, None)
        if value:
            return value
    if plan.topic_id_attr:
        value = getattr(obj, plan.topic_id_attr, None)
        if value is not None and value.int:
            return str(value)
    return None


def _partitions(obj: Any, plan: _Plan, topic: str | None, out: list) -> None:
    topic = _label(obj, plan) or topic
    if plan.partition_attr is not None:
        partition = getattr(obj, plan.partition_attr)
        for attr in plan.codes:
            code = getattr(obj, attr, 0)
            if code:
                out.append((topic, partition, code))
    for attr, is_array, sub in plan.branches:
        value = getattr(obj, attr, None)
        if value is None:
            continue
        for item in (value if is_array else (value,)):
            _partitions(item, sub, topic, out)


def partition_errors(api_key: int, api_version: int, body: Any) -> list[tuple[str | None, int, int]]:
    """(topic name or topic id text, partition index, code) for every non-zero
    error code held by a partition-level struct."""
    plan, _t, _e = _plan_for_body(api_key, api_version, body)
    out: list[tuple[str | None, int, int]] = []
    _partitions(body, plan, None, out)
    return out
