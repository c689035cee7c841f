"""Capture files to ordered TCP byte streams: capture formats, link layers,
the capture-set rule, reassembly."""

from kdissect import native as _native

_native.extend(__path__, __name__)  # this package's compiled modules, when in use
