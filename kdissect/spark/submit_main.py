"""spark-submit entry for the batch job.

    spark-submit --py-files kdissect.zip kdissect/spark/submit_main.py CAPTURE... -o OUTDIR

Takes the same arguments as `kdissect spark` except --master (spark-submit
decides where the job runs): both are built from
`kdissect.spark.options.SparkJobOptions`, and errors come out the same way.
"""

from __future__ import annotations

import sys

from kdissect.spark.options import SparkJobOptions, job_options


def submit(options: SparkJobOptions) -> None:
    """Run the job in the session spark-submit configured; print its summary."""
    from kdissect.shared.extras import require

    require("spark", "submit_main.py")
    from kdissect.shared.inputs import expand_inputs
    from kdissect.spark.job import configure_stores, run_job
    from kdissect.spark.session import start_session

    job = job_options(options, None)
    from kdissect.wire import stores

    spark: object = lambda: start_session(None)  # noqa: E731
    if any(stores.is_uri(where) for where in (*options.captures, options.outdir)):
        spark = start_session(None)  # its spark.hadoop.fs.s3a.* settings reach the stores
        configure_stores(spark)
    else:
        configure_stores()
    expand_inputs(options.captures)  # a bad input fails here, before OUTDIR is looked at
    # run_job checks OUTDIR (kdissect.spark.outdir), then joins the session spark-submit configured
    from kdissect.commands.runtime import echo, say

    result = run_job(job, spark=spark, log=lambda message: say(f"kdissect: {message}"))
    echo(result.summary)


def main(argv: list[str] | None = None) -> int:
    from kdissect.commands.runtime import run_click
    from kdissect.shared.options import click_command

    command = click_command("submit_main.py", SparkJobOptions, submit)
    return run_click(command, sys.argv[1:] if argv is None else list(argv), "submit_main.py")


if __name__ == "__main__":
    sys.exit(main())
