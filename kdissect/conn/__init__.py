"""One Kafka connection: detection, the TLS bridge, framing, pairing, trial
decoding, waits, and the Dissector that runs them."""

from kdissect import native as _native

_native.extend(__path__, __name__)  # this package's compiled modules, when in use
