"""The Spark job's command-line options, shared by `kdissect spark` (which
adds --master) and the spark-submit entry (submit_main.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kdissect.shared.options import SIZE, ForensicSettings, flag, forensic_settings, integer, option

if TYPE_CHECKING:
    from kdissect.spark.job import JobOptions


class SparkJobOptions(ForensicSettings):
    """Turn captures into Parquet tables of exchanges, latency, errors,
    throttling, a per-minute time series and the topic, group and client
    tables (the Spark batch job)."""

    outdir: str = option("-o", "--output", required=True, metavar="OUTDIR",
                         help="Output directory, or store URI (s3://, webhdfs://, hdfs://), for the Parquet tables.")
    split_size: int = option("--split-size", kind=SIZE, default="128m", show_default=True,
                             help="Cut pcap and pcapng files larger than this into byte ranges read in parallel "
                                  "(a last range up to 1.1 times this).")
    partitions: int | None = option("--partitions", kind=integer(1), metavar="N",
                                    help="Buckets of the connections handed off between tasks, and partitions of "
                                         "the job's shuffles (default: from input size and cores).")
    no_forensic_tables: bool = flag(
        "--no-forensic-tables",
        help="Skip the topic, group and client tables: their tallies read every Produce's and Fetch's record "
             "batches record by record (export takes a batch's counts from its header) and every group message: "
             "a read task does about 1.4 times the work with them on record-heavy traffic.")
    overwrite: bool = flag("--overwrite", help="OUTDIR holds an earlier output of the job: replace its tables "
                                               "and manifest (files kdissect did not write are kept).")


def job_options(options: SparkJobOptions, master: str | None) -> JobOptions:
    """The job's options from the command line's (both faces: `kdissect spark`, spark-submit)."""
    from kdissect.spark.job import JobOptions

    return JobOptions(inputs=list(options.captures), outdir=options.outdir, ports=options.ports or (9092,),
                      detect=not options.no_detect, master=master, split_size=options.split_size,
                      partitions=options.partitions, tls_keylogs=tuple(options.tls_keylogs),
                      broker_logs=tuple(options.broker_logs),
                      overwrite=options.overwrite, display_filter=options.display_filter,
                      time_from=options.time_from, time_to=options.time_to, clients=tuple(options.clients),
                      brokers=tuple(options.brokers), groups=tuple(options.groups),
                      topics=tuple(options.topics), forensic_tables=not options.no_forensic_tables,
                      **forensic_settings(options))
