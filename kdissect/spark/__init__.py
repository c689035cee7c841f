"""The Spark batch job: capture archives -> Parquet tables (see README.md here).

`run_job(JobOptions(...))` runs it; `kdissect spark` and `submit_main.py`
(the spark-submit entry) are thin shells around it. pyspark is imported only
inside functions, so importing this package does not need it.
"""

from kdissect.spark.job import JobOptions, JobResult, run_job

__all__ = ["JobOptions", "JobResult", "run_job"]
