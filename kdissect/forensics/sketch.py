"""The latency sketches (`LatencyHistogram`, `QuantileSketch`) now live in
`kdissect.sketch`, in the base layer: the connection layer's broker-log join
keeps its clock offsets in one. This name stays for the analysis modules
that import them from here."""

from __future__ import annotations

from kdissect.sketch import EXACT_LIMIT, RELATIVE_ACCURACY, LatencyHistogram, QuantileSketch, bucket_centre, bucket_of

__all__ = ["EXACT_LIMIT", "RELATIVE_ACCURACY", "LatencyHistogram", "QuantileSketch", "bucket_centre", "bucket_of"]
