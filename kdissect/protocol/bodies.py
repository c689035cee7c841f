"""Typed body classes, for editors and type checkers.

Each Kafka message has a generated class (in `_generated/`) declaring every
field of every version with its Python type; nested structs are classes
inside it (``ProduceRequest.TopicProduceData``). Decoded bodies are
instances of per-version subclasses, so ``isinstance`` both checks the
message at run time and narrows the type for a checker:

    from kdissect.protocol.bodies import ProduceRequest

    request = decode_request(frame)
    if isinstance(request.body, ProduceRequest):
        request.body.topic_data[0].name  # str for mypy and your editor

A field that the decoded version lacks is absent (AttributeError), as on the
body itself. The consumer-protocol structures are here too
(``ConsumerProtocolSubscription``, ``ConsumerProtocolAssignment``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kdissect.protocol._generated.bodies import MODULES

if TYPE_CHECKING:
    from kdissect.protocol._generated.bodies import *  # noqa: F403

__all__ = sorted(MODULES)


def __getattr__(name: str) -> Any:
    """Load the generated module defining a class on first use (loading the
    tables of every API at once takes about a tenth of a second)."""
    module = MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'kdissect.protocol.bodies' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kdissect.protocol._generated.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(MODULES))
