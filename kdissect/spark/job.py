"""The batch job: capture archive -> Parquet tables under OUTDIR.

Driver steps (nothing large is collected: split plans, per-range record
counts, one accounting row per task, a key per Kafka connection, the summary
tables' contributions):

1. expand the inputs, order them as one capture set (noting each file's
   timestamp resolution); claim OUTDIR (kdissect.spark.outdir: refused
   unless new, empty or, with --overwrite, an earlier output, whose files it
   removes); plan byte-range splits;
2. probe each cut file's ranges for their first record from a small window
   at each split point (driver threads, while the JVM starts); the tasks
   number packets locally, and after the read the driver checks that the
   ranges chained and makes frame numbers global (kdissect.spark.plan),
   reading a file again after a whole-range pre-pass if they did not;
3. read splits (`mapInArrow`), dissecting the 4-tuples wholly inside a split
   there (kdissect.spark.inrange) and leaving the others' segment runs in
   files by bucket of 4-tuple; then a task per bucket merges its runs by
   4-tuple and capture order (kdissect.spark.handoff) and runs them through
   its `Dissector` one 4-tuple at a time; each task writes its exchange and partition
   error rows, and its Kafka connections' keys, to its own Arrow files (see
   part_files.py) and hands back only its accounting;
4. number streams by ranking the connections' classification keys (on the
   driver), and have each task partition rewrite its files as the final
   Parquet parts of `exchanges/` and `partition_errors/` and hand back its
   contributions to the summary tables, which the driver merges
   (`tables.finish_tables`, one job; in local mode with one task slot the
   driver finishes the parts itself); the driver writes the small summary tables;
5. write `manifest.json` and print a short summary.
"""

from __future__ import annotations

import json
import math
import posixpath
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from kdissect.wire import stores
from kdissect.model.accounting import Accounting
from kdissect.shared.atomic import OutputError
from kdissect.wire.captureset import timestamp_unit
from kdissect.forensics.latency import DEFAULT_HORIZON_NS
from kdissect.shared.inputs import expand_inputs, file_kind
from kdissect.shared.protected_inputs import ProtectedInputs
from kdissect.records.codecs import DEFAULT_LIMIT
from kdissect.spark import plan as planning
from kdissect.spark.outdir import MANIFEST, claim_outdir
from kdissect.shared.outdir_tree import RUNNING, SUCCESS, Tree

DEFAULT_PORTS = (9092,)
# the forensic tables (kdissect.spark.forensics), left out with --no-forensic-tables
FORENSIC_TABLES = ("topics", "topic_lag", "end_to_end", "groups", "group_commits", "group_lag",
                   "group_lag_over_time", "share_groups", "share_group_members",
                   "clients", "producers", "transactions", "transaction_markers")
TABLES = ("exchanges", "partition_errors", "latency", "waits", "errors", "errors_by_client", "throttle", "timeseries",
          *FORENSIC_TABLES)
# written with --broker-log (kdissect.spark.brokerlog)
BROKER_LOG_TABLES = ("broker_latency", "broker_principals", "broker_unmatched")
WORK_DIR = "_work"  # the tasks' Arrow files before stream numbering (see part_files.py)


@dataclass
class JobOptions:
    inputs: list[str]
    outdir: str
    ports: tuple[int, ...] = DEFAULT_PORTS
    detect: bool = True
    master: str | None = "local[*]"
    split_size: int = planning.DEFAULT_SPLIT_SIZE
    partitions: int | None = None  # shuffle partitions; None: from data size and cores
    tls_keylogs: tuple[str, ...] = ()  # key log files; read on the driver, shipped in the tasks' closure
    # the forensic tables' settings (kdissect.shared.options.ForensicSettings)
    horizon_ns: int = DEFAULT_HORIZON_NS
    max_uncompressed: int = DEFAULT_LIMIT
    broker_logs: tuple[str, ...] = ()  # Kafka request logs joined to the exchanges (kdissect.spark.brokerlog)
    overwrite: bool = False  # replace an earlier output's tables (kdissect.spark.outdir)
    # which exchanges the tables hold (kdissect.filters.selection), as on the command
    # line: display filter, --from, --to, --client, --broker, --group, --topic
    display_filter: str | None = None
    time_from: str | None = None
    time_to: str | None = None
    clients: tuple[str, ...] = ()
    brokers: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    topics: tuple[str, ...] = ()
    # dissect the connections wholly inside one split where they are read
    # (kdissect.spark.inrange); False shuffles every connection (tests, A/B)
    in_place: bool = True
    # the topic, group and client tables (FORENSIC_TABLES); False: not tallied, not written
    forensic_tables: bool = True


@dataclass
class JobResult:
    manifest: dict[str, Any]
    summary: str
    splits: list[planning.Split] = field(default_factory=list)


def shuffle_partitions(total_bytes: int, slots: int, in_place: bool = False) -> int:
    """Buckets of the shipped connections (the dissecting tasks of
    kdissect.spark.handoff; also the partitions of the job's other
    shuffles), a multiple of the slots. (The measurements below were made
    when the buckets were Spark shuffle partitions.)

    Every connection shuffled (`in_place` False): about 32 MiB of capture
    each and at least four per task slot, so the last wave of tasks keeps
    every slot busy (connections hash evenly enough); one slot has no wave to
    balance, so only the 32 MiB rule applies.

    Connections dissected where they are read (`in_place`, kdissect.spark.inrange):
    only those crossing a split go through the shuffle (~1/5 of the bytes of
    bench_spark.py's archives), so one partition per slot, and one per slot
    per `_IN_PLACE_BYTES` of capture (the split size: a partition gets no
    more than a split's worth even if every connection crosses). Each
    partition is a dissecting task, a set of work files and forensic state
    to merge, and a part to finish. Measured on the 60 MB archive (10 MB of
    crossing connections): one core, 1 partition against 2, the job's CPU
    beyond start-up 6.8 s against 7.4 s (JVM 0.2 s against 0.5 s); two
    cores, 2 against 8, the dissect stage's JVM CPU 0.3 s against 1.1 s.
    (A run redone with every connection shuffled, after an in-place
    conflict, keeps this count.)"""
    if in_place:
        wanted = max(slots, math.ceil(total_bytes / _IN_PLACE_BYTES))
    else:
        wanted = max(4 * slots if slots > 1 else 1, math.ceil(total_bytes / (32 << 20)))
    return math.ceil(wanted / slots) * slots


_IN_PLACE_BYTES = planning.DEFAULT_SPLIT_SIZE


def read_task_sizes(splits: int, slots: int) -> list[int]:
    """Splits per task of the read stage, in the order Spark launches them.
    Each task costs the JVM's scheduling and a Python task's set-up, and a
    worker's collection after it (the JVM's executor thread alone ~16-21 ms
    a task: bench_spark.py's many-small archive of 22 splits read by 22
    tasks and by one on one core). One slot has no wave to balance, so its
    one task reads every split; up to four splits per slot, one split a
    task. Beyond that consecutive splits share a task, in shrinking shares
    (each task about 1/(2 x slots) of the splits still to launch, down to
    one): the slots take the tasks as they come free, and the last ones
    launched are single splits, so the stage does not end on one slot still
    reading a task of several splits while the others wait (on two cores,
    22 even slices of 2-3 splits ended with one task running ~1.7 s alone)."""
    if slots <= 1:
        return [splits] if splits else [0]
    if splits <= 4 * slots:
        return [1] * splits if splits else [0]
    sizes = []
    left = splits
    while left:
        size = max(1, math.ceil(left / (2 * slots)))
        sizes.append(size)
        left -= size
    return sizes


def read_task_groups(splits: Sequence[planning.Split], slots: int) -> list[list[planning.Split]]:
    """The read stage's tasks in the order Spark launches them, each the
    splits it reads (in capture order), as many a task as `read_task_sizes`
    says. On several slots the largest splits (by bytes; ties in capture
    order) are launched first and the smallest last, so the stage ends on
    the smallest tasks: a file's short last range or a small rotated file
    launched in the middle left the other slots waiting on a full-size range
    at the end. (Each split keeps its own task partition and files, so the
    grouping does not change what is written.) One slot: one task, capture order."""
    ordered = list(splits) if slots <= 1 else sorted(splits, key=lambda split: split.start - split.end)
    groups, done = [], 0
    for size in read_task_sizes(len(ordered), slots):
        groups.append(sorted(ordered[done:done + size], key=lambda split: split.split_id))
        done += size
    return groups


def _with_carried_secrets(keylog: Any, pcapngs: list[str]) -> Any:
    """`keylog` with the TLS secrets pcapng files carry before their first
    packet (Decryption Secrets Blocks, as editcap injects them). The single
    process also uses blocks met later in a file; the job reads the files'
    heads only, on the driver."""
    from kdissect.wire.capture import leading_secrets

    found = [secret for path in pcapngs for secret in leading_secrets(path)]
    if not found:
        return keylog
    from kdissect.conn.tls import EMPTY_KEYLOG, parse_decryption_secrets

    merged = keylog if keylog is not None else EMPTY_KEYLOG
    for secret in found:
        merged = merged.merged(parse_decryption_secrets(secret.data, secret.kind))
    return merged


def _ordered_captures(inputs: Sequence[str]
                      ) -> tuple[list[tuple[str, str]], list[int], list[int | None], list[str]]:
    """(path, kind) in capture-set order, each file's resolution (ticks per
    second) and first packet time (ns; None: no packets), skipped files.
    Paths are local paths or store URIs (kdissect.wire.stores)."""
    from kdissect.wire.capture import describe_captures

    files, skipped = expand_inputs(list(inputs))
    described = describe_captures(files)
    as_given = {str(Path(path)): path for path in files}  # (pathlib folds a URI's "//")
    paths = [as_given.get(str(f.path), str(f.path)) for f in described]
    return ([(path, file_kind(path) or "pcap") for path in paths], [f.resolution for f in described],
            [f.first_ts for f in described], skipped)


def capture_name(path: str) -> str:
    """A capture's file name (the capture column), from a path or a store URI."""
    return posixpath.basename(path.rstrip("/")) if stores.is_uri(path) else Path(path).name


def configure_stores(spark=None) -> stores.StoreSettings:
    """The stores' settings for this run (Hadoop and Spark configuration,
    then the AWS chain), in force on the driver; the tasks get them with
    their closures."""
    conf = dict(spark.sparkContext.getConf().getAll()) if spark is not None else None
    settings = stores.StoreSettings.from_conf(conf)
    stores.configure(settings)
    return settings


def _selection_values(options: JobOptions, paths: list[str]) -> tuple | None:
    """The tasks' Selection (`Selection.task_values`), checked here; None
    when nothing is selected. With --topic, the capture set's topic names
    are learned first, here (one pass that decodes only the messages naming
    topic ids): a topic named only by its id on one connection (Fetch v13+
    ...) is named by Metadata on another, which its task does not see."""
    if not (options.display_filter or options.time_from or options.time_to or options.clients or options.brokers
            or options.groups or options.topics):
        return None
    from kdissect.filters.selection import Selection

    start = None
    if any(t and t.strip().startswith("+") for t in (options.time_from, options.time_to)):
        from kdissect.wire.capture import describe_captures

        start = min((f.first_ts for f in describe_captures(paths) if f.first_ts is not None), default=None)
    checked = Selection.from_options(options, start)
    names = None
    if options.topics:  # (paths may be store URIs: the capture reader reads them as the tasks do)
        from kdissect.filters.mentions import capture_topic_names

        names = capture_topic_names(paths, options.ports, options.detect, options.tls_keylogs)
    return checked.task_values(names)


def run_job(options: JobOptions, spark=None, log: Callable[[str], None] | None = None) -> JobResult:
    """Run the whole job; `spark` may be an existing session (tests), or a
    function that starts one (spark-submit), called once OUTDIR is claimed.
    A file a task could not write (a full disk) is the task's one-line
    OutputError again, not Spark's wrapping of it."""
    try:
        return _run_job(options, spark, log)
    except Exception as problem:
        import re

        name = re.escape(f"{OutputError.__module__}.{OutputError.__qualname__}")  # as the worker's traceback spells it
        found = re.search(name + r": (cannot write [^\n]*)", str(problem))
        if found is None:
            raise
        raise OutputError(found.group(1)) from None


def _run_job(options: JobOptions, spark: Any, log: Callable[[str], None] | None) -> JobResult:
    from kdissect.spark.session import start_session

    started = time.monotonic()
    timings: dict[str, float] = {}

    def say(message: str, step: str | None = None) -> None:
        if step is not None:
            timings[step] = round(time.monotonic() - started, 1)
        if log is not None:
            log(message)

    if callable(spark) and any(stores.is_uri(where) for where in (options.outdir, *options.inputs)):
        # the stores take their settings from the session spark-submit
        # configured (spark.hadoop.fs.s3a.*): joined before OUTDIR is claimed
        spark = spark()
    store_settings = configure_stores(None if callable(spark) else spark)
    ordered, resolutions, firsts, skipped = _ordered_captures(options.inputs)
    # checked (a typo is exit 2) before OUTDIR is touched; the tasks rebuild it
    selection = _selection_values(options, [path for path, _ in ordered])
    # the one place OUTDIR is checked and prepared, before Spark starts and
    # before anything under it is written or removed (TLS key logs are inputs too)
    broker_logs: list[str] = []
    if options.broker_logs:
        from kdissect.conn.brokerlog.parse import request_log_files

        broker_logs = request_log_files(list(options.broker_logs))
    inputs = ProtectedInputs.of_arguments([*options.inputs, *options.broker_logs],
                                          [*(path for path, _ in ordered), *options.tls_keylogs, *broker_logs])
    claimed = claim_outdir(options.outdir, inputs, options.overwrite, (*TABLES, *BROKER_LOG_TABLES), WORK_DIR,
                           store_settings)
    if callable(spark):
        spark = spark()
    keylog = None
    if options.tls_keylogs:
        # read once here; the tasks get the parsed secrets with their closure
        # (like a broadcast), never through OUTDIR or a file of ours
        from kdissect.conn.tls import read_keylog_files

        keylog = read_keylog_files(list(options.tls_keylogs))
    keylog = _with_carried_secrets(keylog, [path for path, kind in ordered if kind == "pcapng"])
    sizes = [planning.file_size(path) for path, _ in ordered]
    splits = planning.plan_splits(ordered, options.split_size, sizes)
    capture_names = [capture_name(path) for path, _ in ordered]
    ts_unit = timestamp_unit(resolutions)
    total_bytes = sum(sizes)
    say(f"{len(ordered)} capture files, {total_bytes / 1e6:.1f} MB, {len(splits)} planned splits")

    # -- 2. probe: each cut file's ranges' first records, from small windows --
    probe = planning.Probe(splits)
    if spark is None:
        try:
            spark = start_session(options.master)
        except BaseException:
            probe.abandon()
            raise
    sc = spark.sparkContext
    planned = splits
    ranges = planning.number_tasks(probe.result())
    splits = planning.read_splits(ranges)
    say(f"{len(splits)} read tasks", "planned")

    # -- 3. read; dissect in place, or hand off by connection -----------------
    from kdissect.spark.dissect import OUTPUT_SCHEMA, dissect_buckets, read_capture_set, read_partition
    from kdissect.spark.handoff import SHIPPED_KEY, launch_order, merge_indexes
    from kdissect.spark.segments import RANGES_KEY, add_read_stats

    partitions = options.partitions or shuffle_partitions(total_bytes, sc.defaultParallelism, options.in_place)
    ports = list(options.ports)
    detect = options.detect
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))  # the arrivals' and forensic tallies' shuffles

    # a Tree (local paths made absolute by claim_outdir: an executor's working
    # directory is not the driver's); the tasks write into it through the store's client
    outdir = Tree(claimed, store_settings)
    work_dir = outdir.sub(WORK_DIR)
    begin_output(outdir)

    max_uncompressed = options.max_uncompressed
    forensic_tables = options.forensic_tables  # False: the tasks tally nothing for them

    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql.pandas.types import from_arrow_schema

    output_schema = from_arrow_schema(OUTPUT_SCHEMA)

    read_stage = {"whole_set": False}  # how the last read stage went

    def read_and_dissect(splits: list[planning.Split], in_place: bool):
        """The read stage (4-tuples wholly inside a split dissected there, see
        kdissect.spark.inrange; the others' runs left under _work/runs), then
        the dissecting stage of the shipped 4-tuples, a task per bucket
        (kdissect.spark.handoff); what comes back is small (a row per split
        and task)."""
        groups = [[split.as_row() for split in group] for group in read_task_groups(splits, sc.defaultParallelism)]
        # One task reads every split (one slot, or one split): it reads the
        # capture set as `kdissect export` does and dissects every connection
        # as read, with nothing held or shipped (dissect.read_capture_set)
        whole_set = in_place and len(groups) == 1
        read_stage["whole_set"] = whole_set
        # One partition per group, made in the JVM: `spark.range` of one id per
        # partition, and the task reads the splits of group `id` (shipped with
        # the function). An RDD of the groups (sc.parallelize + createDataFrame)
        # ran Python workers of its own: a second worker daemon, started after
        # the first (~1.3 s of the first read task), and a second worker per slot.
        group_ids = spark.range(0, len(groups), 1, max(len(groups), 1))
        last_split_id = splits[-1].split_id if splits else -1

        def read(batches):
            from kdissect.shared.allocator import keep_freed_memory

            keep_freed_memory()  # a Python worker lives for the whole job
            stores.configure_once(store_settings)
            # read tasks' partitions are numbered after the dissecting tasks'
            if whole_set:
                return read_capture_set(_group_splits(batches, groups), firsts, partitions, ports, detect,
                                        capture_names, work_dir, keylog, max_uncompressed, selection, forensic_tables)
            return read_partition(_group_splits(batches, groups), in_place, last_split_id, partitions, ports, detect,
                                  capture_names, work_dir, keylog, max_uncompressed, selection, forensic_tables,
                                  buckets=partitions)

        # small: a row per split and task (the Kafka connections' keys are in the tasks' files,
        # part_files.CONNECTIONS); collected as Arrow rather than as pickled Rows
        read_rows = _collected(group_ids.mapInArrow(read, output_schema).select(*_COLLECTED))
        buckets = launch_order(merge_indexes([json.loads(row["accounting"]).get(SHIPPED_KEY, {})
                                              for row in task_rows(read_rows)]))
        if not buckets:  # every 4-tuple was dissected where it was read
            return read_rows

        def dissect(batches):
            from kdissect.shared.allocator import keep_freed_memory

            keep_freed_memory()
            return dissect_buckets(batches, buckets, ports, detect, capture_names, work_dir, keylog,
                                   max_uncompressed, selection, forensic_tables)

        bucket_ids = spark.range(0, len(buckets), 1, len(buckets))
        dissected_rows = _collected(bucket_ids.mapInArrow(dissect, output_schema).select(*_COLLECTED))
        return pa.concat_tables([read_rows, dissected_rows])

    def task_rows(dissected: pa.Table) -> list[dict[str, Any]]:
        return dissected.to_pylist()

    def range_ends(accountings) -> list[dict[str, Any]]:
        ends: list[dict[str, Any]] = []
        for row in task_rows(accountings):
            ends.extend(json.loads(row["accounting"]).get("read", {}).get(RANGES_KEY, []))
        return ends

    dissected = read_and_dissect(splits, options.in_place)
    failed, frame_offsets = planning.check_ranges(ranges, range_ends(dissected))
    fallbacks: list[str] = []
    redone = [path for index, (path, _) in enumerate(ordered) if index in failed]
    if failed:
        # a range's guessed boundary, feed times or pcapng interfaces were not
        # what the ranges before it held: those files are planned again from a
        # whole-range pre-pass, and everything is read again
        say(f"{len(failed)} cut files failed the range check after the read: reading again after a pre-pass of them")
        outdir.delete(WORK_DIR)
        to_scan = planning.ranges_to_scan([split for split in planned if split.capture_index in failed])
        slots = planning.local_task_slots(sc.master)
        scans = (planning.LocalScan(to_scan, slots).result() if slots
                 else planning.scan_with_spark(sc, to_scan))
        ranges, fallbacks = planning.safe_ranges(planned, ranges, failed, scans)
        splits = planning.read_splits(ranges)
        dissected = read_and_dissect(splits, options.in_place)
        failed, frame_offsets = planning.check_ranges(ranges, range_ends(dissected))
        if failed:
            raise RuntimeError(f"ranges of {[ordered[index][0] for index in failed]} did not chain on a second read")
    in_place_conflicts = _in_place_conflicts(work_dir)
    if in_place_conflicts:
        # a 4-tuple dissected in place was seen in another range too: its rows
        # may differ from the CLI's, so everything is done again, shipped
        say(f"{in_place_conflicts} connections dissected in place met again in another range: "
            "reading again with every connection shuffled")
        outdir.delete(WORK_DIR)
        dissected = read_and_dissect(splits, False)
    say("packets read and dissected", "dissected")

    # -- 4. stream numbers, then every table ----------------------------------
    from kdissect.spark import tables
    from kdissect.spark.part_files import read_connection_keys, write_empty_parts
    from kdissect.spark.summaries import write_tables

    from kdissect.conn.tls import TlsStats

    accounting = Accounting()
    tls = TlsStats()
    partition_error_failures = 0
    reading: dict[str, Any] = {}
    in_range = {"tuples_in_place": 0, "tuples_shipped": 0, "bytes_in_place": 0, "bytes_shipped": 0}
    connections = 0  # classified as Kafka: each one gets a stream number
    rows_written = {"exchanges": 0, "partition_errors": 0}
    exchange_rows: dict[int, int] = {}  # per task partition
    for row in task_rows(dissected):
        values = json.loads(row["accounting"])
        values.pop(SHIPPED_KEY, None)
        if "rows_written" in values:  # a dissecting runner's row (a split's carries its read counts)
            exchange_rows[row["task_partition"]] = values["rows_written"].get("exchanges", 0)
        connections += values.pop("classified_connections", 0)
        partition_error_failures += values.pop("partition_error_failures", 0)
        for table, count in values.pop("rows_written", {}).items():
            rows_written[table] += count
        add_read_stats(reading, values.pop("read", {}))
        for name, count in values.pop("in_range", {}).items():
            in_range[name] += count
        tls.add(TlsStats.from_dict(values.pop("tls", {})))
        accounting.add(Accounting.from_dict(values))
    reading.pop(RANGES_KEY, None)
    if reading.get("problems"):
        from kdissect.spark.frames import renumber_text

        reading["problems"] = [renumber_text(text, frame_offsets) for text in reading["problems"]]
    accounting.add_read_stats(_ReadTotals(reading))
    from kdissect.spark.arrivals import produce_answers

    # long polls that a Produce on another connection ended (kdissect.conn.arrivals): one join
    # in local mode the small capture-wide joins run in this process (no Spark job to plan)
    local_mode = planning.local_task_slots(sc.master) is not None
    fixes = produce_answers(spark, work_dir, on_driver=local_mode)
    say("long polls a Produce ended found", "arrivals")
    kafka_connections = read_connection_keys(work_dir).select(list(tables.CONNECTION_COLUMNS))
    forensic_summary = None
    with _Beside() as beside:
        if options.forensic_tables:
            # The forensic tables need only the tasks' files under _work/forensics: they are
            # finished in a driver thread while the finishing job runs (its wait on the JVM
            # leaves the driver's interpreter free), instead of after it with both slots idle.
            from kdissect.spark.forensics import finish_forensics

            # No finishing job when it runs in this process (local mode, one finishing task):
            # nothing to run beside, so the forensic finish runs after it, in turn.
            beside.start(finish_forensics, spark, work_dir, outdir, ts_unit, partitions, options.horizon_ns,
                         on_driver=local_mode, wait=lambda done: _until_a_job_runs(sc, done),
                         in_turn=tables.finishes_here(exchange_rows, sc.defaultParallelism, local_mode))
        summary_rows, finished = tables.finish_tables(sc, kafka_connections, exchange_rows, work_dir, outdir,
                                                      ts_unit, fixes, frame_offsets, on_driver=local_mode)
        for table, count in rows_written.items():
            if finished.get(table, 0) != count:  # every row a task wrote must reach the final table
                raise RuntimeError(f"{table}: {count} rows dissected but {finished.get(table, 0)} written")
        say("exchange parts and summary contributions written", "parts_written")
        write_empty_parts(outdir, ts_unit)
        if options.forensic_tables:
            forensic_summary = beside.result()
            say("forensic tables written", "forensic_tables")
    outdir.delete(WORK_DIR)
    say("exchange tables written", "exchange_tables")
    write_tables(summary_rows, outdir)
    say("summary tables written", "summary_tables")
    broker_log = None
    if options.broker_logs:
        from kdissect.spark.brokerlog import join_broker_log

        broker_log = join_broker_log(spark, outdir, broker_logs, partitions)
        say(f"broker log joined: {broker_log['joined']} of {broker_log['exchanges']} exchanges", "broker_log")
    # Row counts and the printed summary come from the Parquet footers and the
    # small summary tables read on the driver: no further Spark jobs.
    written_tables = [name for name in TABLES if options.forensic_tables or name not in FORENSIC_TABLES]
    counts: dict[str, int] = {name: tables.parquet_rows(outdir, name) for name in written_tables}
    counts["kafka_connections"] = connections
    summary = tables.render_summary(outdir, accounting)
    if broker_log is not None:
        for name in BROKER_LOG_TABLES:
            counts[name] = tables.parquet_rows(outdir, name)
        offset = broker_log["clock_offset"]
        summary += (f"\nbroker log: {broker_log['request_lines']} request lines, {broker_log['joined']} joined to "
                    f"{broker_log['exchanges']} exchanges; clock offset median "
                    + ("-" if offset["median_ms"] is None else f"{offset['median_ms']:.3f} ms") + " (log - capture)")
    if selection is not None:
        summary += f"\nselection: {counts['exchanges']} of {accounting.exchanges} exchanges kept"
    problems = reading.get("problems") or []
    if problems:
        summary += "\nreading problems (see manifest.json):\n" + "\n".join(f"  {p}" for p in problems[:10])

    manifest = {
        "tool": "kdissect spark",
        "master": sc.master,
        "inputs": [
            {"capture_index": index, "path": path, "name": capture_names[index], "format": kind,
             "bytes": sizes[index], "ticks_per_second": resolutions[index],
             "read_tasks": sum(1 for split in splits if split.capture_index == index)}
            for index, (path, kind) in enumerate(ordered)
        ],
        "timestamp_unit": timestamp_unit(resolutions),
        "skipped_files": skipped,
        "split_size": options.split_size,
        "read_tasks": len(splits),
        "byte_range_tasks": sum(1 for split in splits if split.kind in planning.RANGE_KINDS),
        # cut files whose ranges failed the check after the read (kdissect.spark.plan)
        # and were read again after a whole-range pre-pass; of those, the ones read by one task
        "files_read_again_after_range_check": redone,
        "files_read_whole_after_boundary_check": fallbacks,
        "shuffle_partitions": partitions,
        # 4-tuples dissected by the task that read them, and those shuffled (kdissect.spark.inrange);
        # `conflicts`: 4-tuples dissected in place but seen in another range (the run was redone shipped)
        "in_range": {**in_range, "conflicts": in_place_conflicts},
        # the read stage was one task that read the whole capture set in feed order and dissected
        # every connection as read, as `kdissect export` does (in_range then counts nothing)
        "one_read_task": read_stage["whole_set"],
        "ports": list(options.ports),
        "detect": options.detect,
        "selection": None if selection is None else {
            "filter": options.display_filter, "from_ns": selection[1], "to_ns": selection[2],
            "clients": list(options.clients), "brokers": list(options.brokers), "groups": list(options.groups),
            "topics": list(options.topics)},
        "counts": counts,
        "read": reading,
        "accounting": accounting.to_dict(),
        "tls": tls.to_dict(),
        "partition_error_failures": partition_error_failures,
        "forensics": forensic_summary,  # None: the forensic tables were not asked for
        "forensic_tables": options.forensic_tables,
        "broker_log": broker_log,
        "seconds": round(time.monotonic() - started, 3),
        "seconds_since_start_at": timings,
        "input_bytes": total_bytes,
    }
    outdir.write_bytes((json.dumps(manifest, indent=2, sort_keys=False) + "\n").encode(), MANIFEST)
    commit_output(outdir)
    return JobResult(manifest, summary, splits)


def _group_splits(id_batches: Any, groups: list[list[dict[str, Any]]]) -> Any:
    """The read task's Split rows, in order, as Arrow batches (what
    read_partition takes): those of each group whose `id` the task was given."""
    import pyarrow as pa

    for batch in id_batches:
        for group_id in batch.column(0).to_pylist():
            if groups[group_id]:
                yield pa.RecordBatch.from_pylist(groups[group_id])


def _in_place_conflicts(work_dir: Tree) -> int:
    """4-tuples a read task dissected in place that another split saw too
    (from the tasks' `_work/tuples/` files; kdissect.spark.inrange)."""
    from kdissect.spark.inrange import TUPLE_SCHEMA, TUPLES_DIR, conflicts
    from kdissect.spark.tree_rows import read_ipc_files

    return conflicts([read_ipc_files(work_dir.sub(TUPLES_DIR), TUPLE_SCHEMA)])


# the columns read_and_dissect collects
_COLLECTED = ("task_partition", "accounting")


def _collected(frame: Any) -> Any:
    """A small DataFrame's rows as an Arrow table: through Arrow (`toArrow`,
    PySpark 4), else (PySpark 3.5) from its Rows."""
    import pyarrow as pa

    from kdissect.spark.dissect import OUTPUT_SCHEMA

    schema = pa.schema([OUTPUT_SCHEMA.field(name) for name in _COLLECTED])
    if hasattr(frame, "toArrow"):
        return frame.toArrow().cast(schema)
    return pa.Table.from_pylist([row.asDict() for row in frame.collect()], schema=schema)


class _Beside:
    """A driver step run in a thread beside the main one (at most one), as a
    context: leaving it waits for the step, so nothing after the block (the
    removal of `_work/`) runs while the step still reads there; an error of
    the step is raised by `result()`, or on leaving if the block did not ask.
    `wait(done)`, called first in the thread, may hold the step back until
    the main thread gets somewhere; `done` is set once the block has been left
    or `result()` is asked for. `in_turn`: no thread, the step runs when
    `result()` is asked for, or on leaving a block that did not fail (for
    when the main thread has no Spark job to wait on: the two would only
    share one interpreter)."""

    def __init__(self) -> None:
        import threading

        self._pool: Any = None
        self._step: Any = None
        self._in_turn: Callable[[], Any] | None = None
        self._result: Any = None
        self._done = threading.Event()

    def start(self, step: Callable[..., Any], *args: Any, wait: Callable[[Any], None] | None = None,
              in_turn: bool = False, **kwargs: Any) -> None:
        if in_turn:
            self._in_turn = lambda: step(*args, **kwargs)
            return
        from concurrent.futures import ThreadPoolExecutor

        def run() -> Any:
            if wait is not None:
                wait(self._done)
            return step(*args, **kwargs)

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdissect-beside")
        self._step = self._pool.submit(run)

    def result(self) -> Any:
        self._done.set()
        if self._in_turn is not None:
            step, self._in_turn = self._in_turn, None
            self._result = step()
            return self._result
        if self._pool is None:
            return self._result  # (an in-turn step already run)
        return self._step.result()

    def __enter__(self) -> "_Beside":
        return self

    def __exit__(self, kind: Any, problem: Any, traceback: Any) -> None:
        self._done.set()
        if self._in_turn is not None:
            if problem is None:
                self.result()  # (raises the step's error)
            return
        if self._pool is None:
            return
        self._pool.shutdown(wait=True)
        if problem is None:
            self._step.result()  # (raises the step's error)


def _until_a_job_runs(sc: Any, done: Any, most: float = 1.0) -> None:
    """Wait until a Spark job runs, `done` is set, or `most` seconds passed.
    A driver step started beside a job's launch shares the interpreter with
    the main thread while that one prepares and pickles the job, which both
    slots wait for; once the job runs, the main thread waits on the JVM."""
    tracker = sc.statusTracker()
    deadline = time.monotonic() + most
    while not done.is_set() and time.monotonic() < deadline and not tracker.getActiveJobsIds():
        done.wait(0.005)


class _ReadTotals:
    """Attribute view of summed ReadStats values (for Accounting.add_read_stats)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getattr__(self, name: str) -> Any:
        return self._values.get(name, [] if name == "problems" else 0)


def begin_output(outdir: Tree) -> None:
    """Start writing the OUTDIR claim_outdir prepared: take away the
    `_SUCCESS` marker (an earlier complete output now reads as incomplete)
    and mark the run."""
    outdir.delete(SUCCESS)
    outdir.write_bytes(b"kdissect spark: written by a job that has not finished (or died)\n", RUNNING)


def commit_output(outdir: Tree) -> None:
    """The last writes of a run: `_SUCCESS` appears only once every table and
    the manifest are complete (write-then-rename of each file, then the marker)."""
    outdir.write_bytes(b"", SUCCESS)
    outdir.delete(RUNNING)
