"""spark-submit entry for the batch job.

    spark-submit --py-files kdissect.zip kdissect/spark/submit_main.py INPUT... -o OUTDIR

Takes the same arguments as `kdissect spark` except --master (spark-submit
decides where the job runs).
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from kdissect.commands.spark import parse_size
    from kdissect.failures import InputError
    from kdissect.spark.job import JobOptions, prepare_outdir, run_job
    from kdissect.spark.session import start_session

    parser = argparse.ArgumentParser(prog="submit_main.py", description="kdissect Spark batch job")
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("-p", "--port", type=int, action="append", default=[])
    parser.add_argument("--no-detect", action="store_true")
    parser.add_argument("--split-size", default="128m")
    parser.add_argument("--partitions", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        options = JobOptions(inputs=args.inputs, outdir=args.output, ports=tuple(args.port) or (9092,),
                             detect=not args.no_detect, master=None, split_size=parse_size(args.split_size),
                             partitions=args.partitions)
        prepare_outdir(args.output)
        spark = start_session(None)  # joins the session spark-submit configured
        result = run_job(options, spark=spark, log=lambda message: print(f"kdissect: {message}", file=sys.stderr))
    except InputError as problem:
        print(f"kdissect: error: {problem}", file=sys.stderr)
        return 2
    print(result.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
