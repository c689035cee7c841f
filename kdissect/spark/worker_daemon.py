"""The Python workers' daemon in local mode (`spark.python.daemon.module`).

Spark starts one daemon per executor and forks a worker from it for each
Python task slot (reused from task to task). Two costs of the stock daemon,
measured with py-spy on `local[1]`:

- Spark puts its `pyspark.zip` and py4j zip first on the workers' path.
  Modules imported from a zip are compiled from source on every import (a
  zip holds no bytecode cache), and each task's `importlib.invalidate_caches()`
  re-reads both zips' directories. When the pip-installed pyspark (and py4j)
  of the same version sits beside them, the zips are dropped from the path
  and the installed packages, with their cached bytecode, are used. Spark
  also puts its spark-core jar on the path (for a pyspark packed inside it,
  which the installed one is not): zipimport re-read its directory of ~6,000
  entries, in Python, in every new worker (~3% of the workers' CPU on the
  bench's many-small archive, py-spy, 2026-11-26); with the installed
  pyspark in use, the jars of its own `jars/` directory are dropped too.
- Every forked worker imported pyspark's worker, pandas, pyarrow and the
  dissector again. They are imported here once, before the fork, so every
  worker starts with them (importing them starts no thread, which the
  daemon requires before forking). That includes what the tasks import on
  first use (pyarrow.dataset for the Parquet writes, ~0.25 s; the forensic
  tallies; every generated message module, ~0.06 s together).
  Not the message codecs built from those modules (kdissect.protocol.objects'
  message_codec, with their schemas and skims): a worker builds the ones its
  captures use on first use (62 on a read task of the bench's many-small
  archive, ~121 M instructions, ~40 ms), and which ones is not known here;
  all 737 (api key, version, direction) cost ~0.3-0.5 s and ~20 MiB in the
  daemon, which starts when the first task asks for a worker, so every run
  would wait for them: more than two workers save (benchmarks/README.md,
  branch mends).
- A reused worker runs `gc.collect()` after every task, which walks every
  tracked object the worker holds: all those modules' objects, again and
  again (about a quarter of the worker's CPU time on the bench's
  many-small archive). They are moved out of the collector's sight with
  `gc.freeze()` before the fork; what a task allocates is collected as before.
- Within tasks the collector runs as in the `kdissect export` command
  (kdissect.cli.CLI_COLLECTION_THRESHOLD): every 200,000 new containers
  instead of 700, as a worker does nothing but dissect and write. At 70,000
  a read task of the record-heavy archive's 61 MB files ran one young
  collection (16-37 ms, nothing freed: the 72,000 young containers it
  walked were the task's live TCP segments, tuples and lists); at 200,000
  none, with the same peak RSS (benchmarks/README.md, branch sketch-gc).
  What cycles can hold uncollected in between is bounded by the threshold,
  as in export.
- The full collection after every task still walked whatever earlier tasks
  left alive (modules imported by tasks, the generated codecs, caches):
  about a tenth of a `local[1]` worker's CPU time on the bench's many-small
  archive (py-spy, 2026-11-26). After each task's collection the survivors
  are frozen too (`_CollectThenFreeze`), so the next collection walks only
  what the next task allocated. Cyclic garbage is still collected before
  the freeze; what a frozen object later drops is freed by its reference
  count as always (only a cycle among frozen objects would outlive the worker).
"""

from __future__ import annotations

import sys
from pathlib import Path

# new containers between two young collections in a worker (as the export
# command's, kdissect.cli.CLI_COLLECTION_THRESHOLD)
FEWER_COLLECTIONS = 200_000


def _installed_twin(zip_path: str) -> bool:
    """Whether a zip Spark put on the path (SPARK_HOME/python/lib/X.zip) has
    the same package installed as a directory, of the same version (pyspark)."""
    path = Path(zip_path)
    if path.suffix != ".zip" or len(path.parents) < 4 or path.parents[1].name != "python":
        return False
    spark_home = path.parents[2]
    site = spark_home.parent
    if path.name == "pyspark.zip":
        import zipfile

        try:
            with zipfile.ZipFile(path) as archive:
                zipped = archive.read("pyspark/version.py")
            installed = (spark_home / "version.py").read_bytes()
        except (OSError, KeyError, zipfile.BadZipFile):
            return False
        return zipped == installed and (spark_home / "__init__.py").is_file()
    if path.name.startswith("py4j-"):
        return (site / "py4j" / "__init__.py").is_file()
    return False


def prefer_installed_pyspark() -> None:
    """Drop Spark's zips from sys.path where the same packages are installed,
    and then the installed pyspark's own jars (they hold no Python)."""
    dropped = [entry for entry in sys.path if _installed_twin(entry)]
    if not dropped or not any(Path(entry).name == "pyspark.zip" for entry in dropped):
        return
    jars = {Path(entry).parents[2] / "jars" for entry in dropped if Path(entry).name == "pyspark.zip"}
    dropped += [entry for entry in sys.path if entry.endswith(".jar") and Path(entry).parent in jars]
    sys.path[:] = [entry for entry in sys.path if entry not in dropped]
    for entry in dropped:
        sys.path_importer_cache.pop(entry, None)
    for name in [name for name, module in sys.modules.items()
                 if name.split(".")[0] in ("pyspark", "py4j") and ".zip" in (getattr(module, "__file__", "") or "")]:
        del sys.modules[name]  # imported from a zip before this ran (none expected with `-m` of this module)


def _preload() -> None:
    import pandas  # noqa: F401  (pyarrow imports it on the first pa.array of a task)
    import pyarrow  # noqa: F401
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import pyspark.worker  # noqa: F401

    import pyarrow.dataset  # noqa: F401  (~0.25 s; imported by the first Parquet write of a task)
    import pyarrow.acero  # noqa: F401  (the finishing tasks' first sort_by)
    import pyarrow.pandas_compat  # noqa: F401

    import kdissect.spark.arrivals  # noqa: F401
    import kdissect.spark.dissect  # noqa: F401
    import kdissect.spark.forensics  # noqa: F401
    import kdissect.spark.inrange  # noqa: F401
    import kdissect.spark.summaries  # noqa: F401
    _preload_task_modules()


# modules a worker's first task still imported after the fork (a probe of the
# worker's sys.modules around each task, admin.pcap on local[2], 2026-11-27):
# every worker paid for them again, and on two slots the second worker's
# share landed in the job's work, not in a tiny run's start-up
_TASK_MODULES = (
    "kdissect.forensics.batches", "kdissect.forensics.clients", "kdissect.forensics.common",
    "kdissect.forensics.core", "kdissect.forensics.groups", "kdissect.forensics.lag_history",
    "kdissect.forensics.share", "kdissect.forensics.spill", "kdissect.forensics.topics",
    "kdissect.forensics.transactions", "kdissect.model.times", "kdissect.protocol.errors",
    "kdissect.records.quick_spans", "kdissect.shared.allocator", "kdissect.shared.output",
)


def _preload_task_modules() -> None:
    """The modules tasks import on first use, and every generated message
    module (all of them: ~0.06 s, and which ones a capture needs is not known here)."""
    import importlib
    import pkgutil

    import kdissect.protocol._generated as generated

    names = list(_TASK_MODULES)
    names += [f"{generated.__name__}.{module.name}" for module in pkgutil.iter_modules(generated.__path__)]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # a module renamed or gone: the task imports what it needs itself
            pass


class _CollectThenFreeze:
    """Stands for the `gc` module in pyspark's daemon, which calls
    `gc.collect()` after each task of a reused worker: collects, then moves
    the survivors out of later collections' sight."""

    def __getattr__(self, name: str) -> object:
        import gc

        return getattr(gc, name)

    @staticmethod
    def collect(*args: int) -> int:
        import gc

        found = gc.collect(*args)
        gc.freeze()
        return found


if __name__ == "__main__":
    prefer_installed_pyspark()
    _preload()
    import pyspark.daemon
    from pyspark.daemon import manager

    import gc

    pyspark.daemon.gc = _CollectThenFreeze()  # type: ignore[assignment]

    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(max(threshold[0], FEWER_COLLECTIONS), threshold[1], threshold[2])

    manager()
