"""The Spark job's command-line options, shared by `kdissect spark` (which
adds --master) and the spark-submit entry (submit_main.py)."""

from __future__ import annotations

from kdissect.options import SIZE, CaptureInputs, integer, option


class SparkJobOptions(CaptureInputs):
    """Turn captures into Parquet tables of exchanges, latency, errors,
    throttling and a per-minute time series (the Spark batch job)."""

    outdir: str = option("-o", "--output", required=True, metavar="OUTDIR",
                         help="Output directory for the Parquet tables.")
    split_size: int = option("--split-size", kind=SIZE, default="128m", show_default=True,
                             help="Cut pcap files larger than this into byte ranges read in parallel.")
    partitions: int | None = option("--partitions", kind=integer(1), metavar="N",
                                    help="Shuffle partitions (default: from input size and cores).")
