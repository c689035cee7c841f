"""What the faces share: table writers, atomic outputs, protected inputs,
option declarations, capture arguments, extras, the allocator tuning."""

from kdissect import native as _native

_native.extend(__path__, __name__)  # the native column text (_native_text), when in use
