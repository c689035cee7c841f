"""Render decoded protocol objects as JSON-ready values or an indented tree.

Credentials (SASL tokens, delegation-token HMACs, SCRAM salts and salted
passwords) are replaced by a placeholder unless ``show_secrets`` is True;
the decoded objects themselves always keep the bytes.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from kdissect.protocol.errors import error_name
from kdissect.text_escape import quoted
from kdissect.protocol.model import ConsumerProtocolData, Request, RequestHeader, Response, ResponseHeader, Struct

__all__ = ["to_jsonable", "render_tree", "redacted"]

_TREE_BYTES = 48  # bytes shown inline in a tree before truncating


def redacted(value: Any) -> str:
    if value is None:
        return "<redacted: null>"
    size = len(value) if hasattr(value, "__len__") else "?"
    return f"<redacted {size} bytes>"


def _tags_json(tags: Any) -> list:
    return [{"tag": tag, "hex": bytes(raw).hex()} for tag, raw in tags]


def to_jsonable(obj: Any, show_secrets: bool = False) -> Any:
    """Plain dicts/lists/str/int/float/bool/None for json.dumps.
    bytes become hex text, UUIDs text, unknown tags {"tag", "hex"} lists."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, Struct):
        secrets = obj._secrets
        out: dict[str, Any] = {}
        for name in obj._fields:
            value = getattr(obj, name)
            if name in secrets and not show_secrets and value is not None:
                out[name] = redacted(value)
            else:
                out[name] = to_jsonable(value, show_secrets)
        if obj.unknown_tagged_fields:
            out["unknown_tagged_fields"] = _tags_json(obj.unknown_tagged_fields)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(item, show_secrets) for item in obj]
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).hex()
    if isinstance(obj, uuid.UUID):
        return str(obj)
    if isinstance(obj, ConsumerProtocolData):
        return {"consumer_protocol": obj.kind, "version": obj.version, **to_jsonable(obj.data, show_secrets)}
    if isinstance(obj, Request):
        out = {"api_key": obj.api_key, "api_name": obj.name, "api_version": obj.api_version,
               "header": to_jsonable(obj.header, show_secrets), "body": to_jsonable(obj.body, show_secrets)}
        if obj.assumed_version:
            out["assumed_version"] = obj.assumed_version
        return out
    if isinstance(obj, Response):
        out = {"api_key": obj.api_key, "api_name": obj.name, "api_version": obj.api_version,
               "header": to_jsonable(obj.header, show_secrets), "body": to_jsonable(obj.body, show_secrets)}
        if obj.assumed_version:
            out["assumed_version"] = obj.assumed_version
        return out
    if isinstance(obj, RequestHeader):
        out = {"api_key": obj.api_key, "api_version": obj.api_version,
               "correlation_id": obj.correlation_id, "client_id": obj.client_id}
        if obj.tagged_fields:
            out["tagged_fields"] = _tags_json(obj.tagged_fields)
        return out
    if isinstance(obj, ResponseHeader):
        out = {"correlation_id": obj.correlation_id}
        if obj.tagged_fields:
            out["tagged_fields"] = _tags_json(obj.tagged_fields)
        return out
    return str(obj)


def _bytes_text(raw: bytes | bytearray | memoryview) -> str:
    raw = bytes(raw)
    shown = raw[:_TREE_BYTES]
    text = f"<{len(raw)} bytes> {shown.hex(' ')}"
    if len(raw) > _TREE_BYTES:
        text += " ..."
    printable = sum(1 for b in shown if 0x20 <= b < 0x7F)
    if shown and printable * 4 >= len(shown) * 3:  # mostly text: show it, dots for the rest
        ascii_text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in shown)
        text += f'  "{ascii_text}"' + ("..." if len(raw) > _TREE_BYTES else "")
    return text


def _scalar(value: Any) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return quoted(value)  # captured text: escaped as every text face escapes it
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _bytes_text(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return None


def _tree(obj: Any, indent: str, lines: list[str], show_secrets: bool) -> None:
    """Append the children of a struct-like object."""
    if isinstance(obj, ConsumerProtocolData):
        lines.append(f"{indent}consumer_protocol: {obj.kind} v{obj.version}")
        obj = obj.data
    secrets = obj._secrets
    for name in obj._fields:
        value = getattr(obj, name)
        if name in secrets and not show_secrets and value is not None:
            lines.append(f"{indent}{name}: {redacted(value)}")
            continue
        _entry(name, value, indent, lines, show_secrets)
    for tag, raw in obj.unknown_tagged_fields or ():
        lines.append(f"{indent}tag {tag}: {_bytes_text(raw)}")


def _entry(name: str, value: Any, indent: str, lines: list[str], show_secrets: bool) -> None:
    text = _scalar(value)
    if text is not None:
        lines.append(f"{indent}{name}: {text}")
    elif isinstance(value, (Struct, ConsumerProtocolData)):
        lines.append(f"{indent}{name}:")
        _tree(value, indent + "  ", lines, show_secrets)
    elif isinstance(value, (list, tuple)):
        lines.append(f"{indent}{name}: [{len(value)}]")
        for index, item in enumerate(value):
            _entry(f"[{index}]", item, indent + "  ", lines, show_secrets)
    else:
        lines.append(f"{indent}{name}: {value!r}")


def render_tree(obj: Any, show_secrets: bool = False) -> str:
    """Indented multi-line view of a Request, Response or struct."""
    lines: list[str] = []
    if isinstance(obj, (Request, Response)):
        head = obj.header
        kind = "request" if isinstance(obj, Request) else "response"
        lines.append(f"{obj.name} {kind} v{obj.api_version} (api key {obj.api_key})")
        if obj.assumed_version:
            lines.append(f"  assumed: {obj.assumed_version}")
        lines.append("  header:")
        if isinstance(head, RequestHeader):
            lines.append(f"    correlation_id: {head.correlation_id}")
            lines.append(f"    client_id: {_scalar(head.client_id)}")
        else:
            lines.append(f"    correlation_id: {head.correlation_id}")
        for tag, raw in head.tagged_fields:
            lines.append(f"    tag {tag}: {_bytes_text(raw)}")
        lines.append("  body:")
        before = len(lines)
        _tree(obj.body, "    ", lines, show_secrets)
        # name error codes inline: "error_code: 3 (UNKNOWN_TOPIC_OR_PARTITION)"
        for index in range(before, len(lines)):
            line = lines[index]
            key, _sep, rest = line.partition(": ")
            if key.strip().endswith("error_code") and rest.lstrip("-").isdigit():
                lines[index] = f"{line} ({error_name(int(rest))})"
        return "\n".join(lines)
    if isinstance(obj, (Struct, ConsumerProtocolData)):
        _tree(obj, "", lines, show_secrets)
        return "\n".join(lines)
    return _scalar(obj) or repr(obj)
