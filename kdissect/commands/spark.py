"""`kdissect spark CAPTURE... -o OUTDIR`: the batch job over a capture archive."""

from __future__ import annotations

from kdissect.shared.options import click_command, option
from kdissect.spark.options import SparkJobOptions, job_options


class SparkOptions(SparkJobOptions):
    """Turn captures into Parquet tables of exchanges, latency, errors,
    throttling and a per-minute time series (the Spark batch job; local mode
    unless --master names a cluster)."""

    master: str = option("--master", default="local[*]", show_default=True, help="Spark master URL.")


def spark(options: SparkOptions) -> None:
    """Run the job in local mode or on --master's cluster; print its summary."""
    from kdissect.shared.extras import require

    require("spark", "`kdissect spark`")
    from kdissect.shared.inputs import expand_inputs
    from kdissect.spark.job import configure_stores, run_job
    from kdissect.spark.session import check_java

    job = job_options(options, options.master)
    check_java()  # before anything slow, and before Spark prints its own errors
    configure_stores()  # inputs may be store URIs (kdissect.wire.stores)
    expand_inputs(options.captures)  # a bad input fails here, before OUTDIR is looked at
    # run_job checks OUTDIR (kdissect.spark.outdir) before it starts Spark
    from kdissect.commands.runtime import echo, say
    from kdissect.text_escape import escape_text

    result = run_job(job, log=lambda message: say(f"kdissect: {message}"))
    echo(result.summary)
    echo(f"tables and manifest.json written to {escape_text(options.outdir)}")


command = click_command("spark", SparkOptions, spark)
