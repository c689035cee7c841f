"""Benchmark of the Spark job: one and two cores against one `kdissect export` process.

    python3 benchmarks/bench_spark.py --shape many-small --format pcap --rounds 3
    python3 benchmarks/bench_spark.py --shape few-large --format pcapng --rounds 3
    python3 benchmarks/bench_spark.py --shape many-small --format pcap --rounds 3 --no-forensic-tables
    python3 benchmarks/bench_spark.py --shape records --rounds 3   # the issue's record-heavy archive
    python3 benchmarks/bench_spark.py --size-mb 1000 --files 7 --split-size 128m --rounds 2   # the older 1 GB archive

1. Builds (once; kept in benchmarks/out/, not committed) an archive of
   rotated pcap files by replaying the lab captures (captures/*.pcap by
   default) over and over: each replay gets its own loopback addresses
   (127.a.b.c on both ends, so every replayed connection is a new 4-tuple)
   and its times shifted to follow the previous replay. Files are cut at a
   size limit wherever that falls, so connections span files as in a real
   rotated capture. IP/TCP checksums are not recomputed (loopback captures
   carry unverified checksums anyway; nothing here checks them).
   Every replay of every source gets its own addresses: the lab captures
   reuse client ports, and within one address that made 4-tuples reused
   seconds apart, which real archives rarely have. Shapes: `many-small` is
   60 MB in 20 files of 3 MB (each file one split;
   splits share a Spark task beyond four tasks per task slot; one task on one slot); `few-large` is
   60 MB in 2 files of 30 MB read with `--split-size 10m` (3 byte ranges a
   file), so connections cross range boundaries as well as file boundaries. `records` is issue #29's
   record-heavy archive: 8 files, each one whole replay of bench_pipeline's
   record-heavy capture (benchmarks/out/records.pcap, about 20,000 mid-size
   Produce and Fetch exchanges carrying records in every codec, 61 MB;
   recorded by bench_pipeline's generator if missing), so at least 440 MB
   (487 MB with today's capture), cut only between replays: every file has its own
   clients (checked) and no connection crosses a file. `connections` is issue
   #29's many-connections shape, not replayed: bench_pipeline's
   connections-syn capture (200,000 client connections of a SYN and one data
   segment each, none closed; `manyconn.py --shape syn-data`, generated if
   missing), one file of 32 MB and one split, so only "1 core" means
   anything (`--only '1 core'`). With --format pcapng the archive
   is rewritten by `editcap -F pcapng` (dumpcap's format).
2. Each round runs, one after the other and each in a fresh process:
     export     `kdissect export ARCHIVE -o cli.parquet`, one process;
     1 core     `kdissect spark --master local[1]`, the whole process tree
                confined to one CPU (sched_setaffinity, as `taskset -c 0`);
     2 cores    `kdissect spark --master local[2]` on the whole machine (2 CPUs);
     2 exports  (with 2 cores) two `kdissect export` processes at once, each
                confined to its own CPU and reading half of the archive's
                files (by bytes): what this machine's two CPUs give two
                independent processes, the ceiling against which to read
                the two-core figure (its rows are not compared: a
                connection crossing from one half to the other is cut);
                each round's two-core figure is also given over its
                two-exports figure ("2 cores against 2 exports"): the
                share of the machine's two-CPU ceiling the job reaches
                (the two runs follow each other, so the machine's phases
                still move it: 0.38-1.04 over four rounds on 2026-11-29);
   each first on a tiny capture (captures/admin.pcap: its time is the
   command's start-up, JVM and session included) and then on the archive.
   A round's figure for a Spark configuration is export's work time
   divided by its own, start-up subtracted from both:
   (export - export tiny) / (spark - spark tiny), by wall time and by CPU
   time (user + system of the whole process tree, sampled from /proc; the
   other load on a shared machine moves it far less than the wall time;
   for two cores the wall time is the figure that counts, on a quiet
   machine). A third figure counts each Spark run's CPU from its line
   `kdissect: N read tasks` on (the read stage planned, the JVM and the
   session up; READ_STAGE_LINE), in the tiny and the archive run alike:
   it leaves out the JVM's own start, whose CPU moved by 5 s between
   tiny runs (6.9-12.3 s on 2026-11-28; 2.7-4.8 s from the line). With `--baseline half` the subtracted run is not the tiny
   capture's but the same command on the first half of the archive's files
   (by bytes; `halves` below): the figure is then what the second half of the
   archive costs each command, which sets aside start-up and every other cost
   a run pays once (a second job, the last tables), not only the tiny
   capture's; two exports then read a quarter each against an eighth
   (so with the "2 cores" row the first half must hold two files at least). Two archive
   runs differ by the same few seconds of noise as an archive and a tiny
   run, so on the 60 MB shapes, where half the archive is 2-3 s of work,
   this figure is noise; it is meant for the record-heavy archive and larger.
   `--checkout DIR` runs another checkout's kdissect on the same
   archive (an A/B against main). The result is the median
   over the rounds and their range; a spread (max - min) over a quarter of
   the median is flagged as too wide to trust. Each round also notes the
   share of the machine's CPU time its host took (steal, /proc/stat) and
   flags a round over 5%: on a shared host that, not the code, is what
   moves the figures most. Results go to
   benchmarks/out/bench_spark_SHAPE_FORMAT.json.
   With --no-forensic-tables the Spark runs leave out the topic, group and
   client tables (`kdissect spark --no-forensic-tables`): they then write
   what export writes (the exchanges) plus their small summary tables.
3. With every table (the default), each round also runs the command line's
   one pass that computes every table the job writes:
     report     `kdissect report ARCHIVE -o cli.html`, one process (the
                exchanges, latency, waits, errors, throttling, time series
                and the topic, group and client tables, then the page);
     page       `kdissect report OUTDIR` on the 1-core run's tables, less
                the same on the tiny capture's tables: what drawing the page
                costs (reading the Parquet tables included, so it is an
                upper bound);
   and gives each Spark configuration's figure against report's work as
   well, as is and with the page taken out (report - report tiny - page):
   Spark with every table set beside the command line doing the same tables.

   Why the confined run: `local[1]` means one task slot, not one CPU. Beside
   its one Python worker, the driver JVM runs the shuffle, Arrow conversion,
   JIT compiler and garbage collector threads, and on a 2-CPU machine those
   use the second CPU, so `local[1]` unconfined is not a one-core baseline.

The machine may be shared: run it when it is otherwise quiet, or expect noise.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench_files import STEAL_WARN_SHARE, StealClock, compiled_modules, steal_said, write_result

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))

# bytes before the IPv4 header, per link type
_LINK_HEADER = {0: 4, 1: 14, 101: 0, 108: 4, 113: 16, 228: 0, 276: 20}


def _source_packets(paths: list[str]) -> list[tuple[int, bytes, int, int, int]]:
    """(relative ts in ns, frame bytes, wire length, offset of the IPv4 header, source index) of the IPv4
    packets of all sources, one source after another, times made relative and sequential."""
    from kdissect.wire.capture import iter_frames

    packets: list[tuple[int, bytes, int, int, int]] = []
    clock = 0
    for index, path in enumerate(paths):
        first = last = None
        for frame in iter_frames([path]):
            offset = _LINK_HEADER.get(frame.linktype)
            if offset is None or len(frame.data) < offset + 20 or frame.data[offset] >> 4 != 4:
                continue
            if offset:  # normalise to Ethernet framing so one output linktype fits all
                ethernet = b"\x00" * 12 + b"\x08\x00"
                data = ethernet + frame.data[offset:]
            else:
                data = b"\x00" * 12 + b"\x08\x00" + frame.data
            first = frame.ts if first is None else first
            last = frame.ts
            packets.append((clock + frame.ts - first, data, frame.wire_len - offset + 14, 14, index))
        if first is not None:
            clock += (last - first) + 10**9
    return packets


def build_archive(sources: list[str], target_bytes: int, files: int, directory: Path,
                  whole_replays: bool = False) -> list[Path]:
    """Write the archive; returns its files. Reuses an existing archive of the right size.
    With `whole_replays`, files are cut only between replays (a file is one or
    more whole replays, so no connection crosses a file and no two files share
    a client) and the archive ends with the replay that reaches `target_bytes`."""
    cut = "between replays" if whole_replays else "at the size limit"
    done = directory / "complete.json"
    if done.exists():
        info = json.loads(done.read_text())
        if info.get("target_bytes") == target_bytes and info.get("sources") == sources \
                and info.get("addresses") == "per source" and info.get("cut", "at the size limit") == cut:
            return [Path(p) for p in info["files"]]
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.pcap"):
        old.unlink()
    packets = _source_packets(sources)
    if not packets:
        raise SystemExit("no IPv4 packets in the sources")
    span = packets[-1][0] + 10**9
    per_file = target_bytes // files
    start = 1_700_000_000 * 10**9
    global_header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    record = struct.Struct("<IIII")
    written: list[Path] = []
    total = 0
    replay = 0
    handle = None
    size = 0
    while total < target_bytes:
        replay += 1
        shift = start + replay * span
        if whole_replays and handle is not None and size >= per_file:
            handle.close()
            handle = None
        for ts, data, wire_len, ip, source in packets:
            # both ends of every connection of this replay of this source move to
            # 127.a.b.c: the lab captures reuse client ports, the archive does not
            number = replay * len(sources) + source
            address = bytes((127, (number // (254 * 256)) % 256, (number // 254) % 256, 1 + number % 254))
            if handle is None or (size >= per_file and not whole_replays):
                if handle is not None:
                    handle.close()
                path = directory / f"archive_{len(written):03d}.pcap"
                handle = open(path, "wb", buffering=1 << 22)
                handle.write(global_header)
                written.append(path)
                size = len(global_header)
            frame = bytearray(data)
            frame[ip + 12 : ip + 16] = address
            frame[ip + 16 : ip + 20] = address
            seconds, nanoseconds = divmod(shift + ts, 10**9)
            handle.write(record.pack(seconds, nanoseconds // 1000, len(frame), wire_len))
            handle.write(frame)
            size += 16 + len(frame)
            total += 16 + len(frame)
    handle.close()
    write_result(done, json.dumps({"target_bytes": target_bytes, "sources": sources,
                                   "files": [str(p) for p in written], "replays": replay,
                                   "addresses": "per source", "cut": cut}))
    return written


def as_pcapng(files: list[Path], directory: Path) -> list[Path]:
    """The archive rewritten as pcapng (dumpcap's format) with editcap -F pcapng; reused when present."""
    directory.mkdir(parents=True, exist_ok=True)
    converted = []
    for path in files:
        target = directory / (path.stem + ".pcapng")
        if not target.exists() or target.stat().st_mtime < path.stat().st_mtime:
            partial = target.with_suffix(".part")
            subprocess.run(["editcap", "-F", "pcapng", str(path), str(partial)], check=True)
            partial.rename(target)
        converted.append(target)
    for stale in set(directory.glob("*.pcapng")) - set(converted):
        stale.unlink()
    return converted


def _timed(command: list[str], log: Path, cpus: set[int] | None = None) -> float:
    """Wall seconds of `command`; with `cpus`, it and all its children run on those CPUs only."""
    return _measured(command, log, cpus)[0]


def _tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Note the CPU seconds (user + system) of `root` and every process under
    it, from /proc (the JVM is not waited for by its parent, so
    RUSAGE_CHILDREN misses it); `seen` keeps each process's latest figure."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    for pid, cpu in times.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            seen[pid] = max(seen.get(pid, 0.0), cpu)


# the kdissect checkout the commands run (--checkout; by default this script's)
CHECKOUT = REPO


def _measured(command: list[str], log: Path, cpus: set[int] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of `command` and every process under it
    (the JVM, Spark's Python workers and the pre-pass processes included),
    sampled from /proc every 0.1 s: a process's last 0.1 s may be missed."""
    wall, cpu, _ = measured_from(command, log, cpus)
    return wall, cpu


# a Spark job's line once its read stage is planned and the JVM and session
# are up: what a run's CPU from there on counts leaves out the JVM's own
# start (its JIT and class loading), which moved by 5 s between runs here
READ_STAGE_LINE = re.compile(r"kdissect: \d+ read tasks")


def measured_from(command: list[str], log: Path, cpus: set[int] | None = None,
                  mark: re.Pattern | None = None) -> tuple[float, float, float | None]:
    """`_measured`'s (wall seconds, CPU seconds), and the CPU seconds from the
    first line of the command's output that `mark` matches to its end (None
    without `mark`; an error if no line matches)."""
    confine = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    seen: dict[int, float] = {}
    at_mark: list[float] = []
    started = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(CHECKOUT))
    with open(log, "w") as out:
        child = subprocess.Popen(command, cwd=CHECKOUT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, preexec_fn=confine)

        def copy_and_watch() -> None:
            assert child.stdout is not None
            for line in child.stdout:
                out.write(line)
                if mark is not None and not at_mark and mark.match(line):
                    now = dict(seen)
                    _tree_cpu(child.pid, now)
                    at_mark.append(sum(now.values()))

        reader = threading.Thread(target=copy_and_watch)
        reader.start()
        while child.poll() is None:
            _tree_cpu(child.pid, seen)
            time.sleep(0.1)
        reader.join()
    wall = time.monotonic() - started
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, command)
    cpu = sum(seen.values())
    if mark is None:
        return wall, cpu, None
    if not at_mark:
        raise SystemExit(f"bench_spark: no line {mark.pattern!r} in {log}")
    return wall, cpu, cpu - at_mark[0]


# name -> (Spark master, CPUs to confine the run to or None)
CONFIGURATIONS = {
    "1 core": ("local[1]", {0}),
    "2 cores": ("local[2]", None),
}
# shape -> (MB, files, split size)
SHAPES = {
    "many-small": (60, 20, "128m"),
    "few-large": (60, 2, "10m"),
    "records": (440, 8, "128m"),
    "connections": (32, 1, "128m"),  # (the capture's size; generated, not replayed)
}
# shapes whose files are cut between replays only (whole replays, distinct clients per file)
WHOLE_REPLAYS = {"records"}


CONNECTIONS = 200_000  # the connections shape's client connections


def connections_archive() -> list[Path]:
    """The connections shape's archive: bench_pipeline's connections-syn
    capture (generated by its generator if missing), alone in its directory."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_pipeline

    directory = OUT / f"archive_connections_syn_{CONNECTIONS}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{bench_pipeline.capture_name('connections-syn', CONNECTIONS)}.pcap"
    bench_pipeline.generate("connections-syn", path, False, 0, CONNECTIONS)
    return [path]


def default_sources(shape: str) -> list[str]:
    """The captures a shape replays by default: the lab captures, or for `records`
    bench_pipeline's record-heavy capture (recorded first by its own generator if missing)."""
    if shape != "records":
        return sorted(glob.glob(str(REPO / "captures" / "*.pcap")))
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_pipeline

    path = OUT / "records.pcap"
    OUT.mkdir(parents=True, exist_ok=True)
    bench_pipeline.generate("records", path, False, bench_pipeline.TCPDUMP_BUFFER_KIB)
    return [str(path)]


def check_distinct_clients(files: list[Path]) -> int:
    """The number of TCP connections (4-tuples) in the archive, read by
    kdissect's own capture reader; exits if any IP address appears in more
    than one file."""
    from kdissect.wire.capture import ReadStats, read_file

    owner: dict[str, int] = {}
    connections: set[tuple[tuple[str, int], ...]] = set()
    for index, path in enumerate(files):
        for segment in read_file(path, index, ReadStats()):
            ends = sorted(((segment.src, segment.sport), (segment.dst, segment.dport)))
            connections.add((ends[0], ends[1]))
            for address in (segment.src, segment.dst):
                if owner.setdefault(address, index) != index:
                    raise SystemExit(f"{path}: address {address} also in {files[owner[address]]}")
    return len(connections)


TINY = REPO / "captures" / "admin.pcap"


def halves(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """The archive's files in two lists of nearly equal bytes (largest first,
    each to the lighter list), each list in capture order."""
    sides: tuple[list[Path], list[Path]] = ([], [])
    weights = [0, 0]
    for path in sorted(files, key=lambda f: -f.stat().st_size):
        lighter = weights.index(min(weights))
        sides[lighter].append(path)
        weights[lighter] += path.stat().st_size
    order = {path: index for index, path in enumerate(files)}
    return sorted(sides[0], key=order.__getitem__), sorted(sides[1], key=order.__getitem__)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _spread(found: list[float], median_key: str) -> tuple[dict, str]:
    """The rounds' median and range, flagged when the range is over a quarter of the median; and as said."""
    median = _median(found)
    too_wide = max(found) - min(found) > median / 4
    summary = {median_key: round(median, 3), "range": [round(min(found), 3), round(max(found), 3)],
               "spread_too_wide": too_wide}
    return summary, (f"{median:.2f}x (range {min(found):.2f}-{max(found):.2f})"
                     + ("  SPREAD TOO WIDE TO TRUST" if too_wide else ""))


def shape_archive(shape: str, fmt: str = "pcap", sources: list[str] | None = None, size_mb: int | None = None,
                  file_count: int | None = None) -> list[Path]:
    """The files of `shape`'s archive in `fmt` (built once into benchmarks/out,
    reused after): replays of `sources` (default: the shape's) up to
    `size_mb` in `file_count` files (default: the shape's)."""
    size_mb = size_mb or SHAPES[shape][0]
    file_count = file_count or SHAPES[shape][1]
    whole_replays = shape in WHOLE_REPLAYS
    started = time.monotonic()
    if shape == "connections":
        files = connections_archive()
        archive_dir = files[0].parent
        name = archive_dir.name.removeprefix("archive_")
    else:
        sources = [str(Path(s).resolve()) for s in sources or default_sources(shape)]
        name = f"{size_mb}mb_{file_count}" + ("_whole_replays" if whole_replays else "")
        archive_dir = OUT / f"archive_{name}"
        files = build_archive(sources, size_mb * 10**6, file_count, archive_dir, whole_replays)
    if whole_replays:
        print(f"archive: {check_distinct_clients(files)} TCP connections, no client address in two files", flush=True)
    if fmt == "pcapng":
        archive_dir = OUT / f"archive_{name}_pcapng"
        files = as_pcapng(files, archive_dir)
    total = sum(f.stat().st_size for f in files)
    print(f"archive: {len(files)} files, {total / 1e6:.0f} MB in {archive_dir} "
          f"(built/reused in {time.monotonic() - started:.0f}s)", flush=True)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*", help="lab captures to replay (default: captures/*.pcap)")
    parser.add_argument("--shape", choices=list(SHAPES), default="many-small")
    parser.add_argument("--size-mb", type=int, help="archive size (default: the shape's)")
    parser.add_argument("--files", type=int, help="files in the archive (default: the shape's)")
    parser.add_argument("--split-size", help="kdissect spark --split-size (default: the shape's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", action="append", choices=list(CONFIGURATIONS),
                        help="run only this Spark configuration (repeatable)")
    parser.add_argument("--format", choices=["pcap", "pcapng"], default="pcap",
                        help="pcapng: the same archive rewritten by editcap -F pcapng")
    parser.add_argument("--no-forensic-tables", action="store_true",
                        help="run kdissect spark with --no-forensic-tables (the tables export writes, and the "
                             "summaries; not the topic, group and client tables)")
    parser.add_argument("--baseline", choices=["tiny", "half"], default="tiny",
                        help="what each command's archive run is set against: its run on the tiny capture "
                             "(start-up) or on the first half of the archive's files (every once-a-run cost)")
    parser.add_argument("--checkout", type=Path, default=REPO,
                        help="run this kdissect checkout (with its own compiled build); the archive and "
                             "results stay in this script's benchmarks/out (default: this script's checkout)")
    args = parser.parse_args()
    global CHECKOUT
    CHECKOUT = args.checkout.resolve()
    configurations = {name: CONFIGURATIONS[name] for name in (args.only or CONFIGURATIONS)}
    split_size = args.split_size or SHAPES[args.shape][2]
    if args.shape == "connections" and set(configurations) != {"1 core"}:
        raise SystemExit("bench_spark: the connections shape is one split: run it with --only '1 core'")
    files = shape_archive(args.shape, args.format, args.sources, args.size_mb, args.files)
    total = sum(f.stat().st_size for f in files)
    print(f"split size {split_size}", flush=True)
    python = sys.executable
    slug = f"{args.shape}_{args.format}" + ("_no-forensic-tables" if args.no_forensic_tables else "") + \
        ("" if args.baseline == "tiny" else f"_{args.baseline}") + ("" if CHECKOUT == REPO else f"_{CHECKOUT.name}")
    spark_options = ["--no-forensic-tables"] if args.no_forensic_tables else []
    results: dict = {"checkout": str(CHECKOUT), "shape": args.shape, "format": args.format, "archive_bytes": total, "archive_files": len(files),
                     "split_size": split_size, "cpu_count": os.cpu_count(), "spark_options": spark_options,
                     "baseline": args.baseline,
                     "rounds": []}
    # a checkout without a current compiled build runs its per-packet modules as plain
    # Python, slower by a third or more, and `export` with it: said before any run
    results["compiled_modules"] = compiled_modules(python, dict(os.environ, PYTHONPATH=str(CHECKOUT)), CHECKOUT)
    if not results["compiled_modules"]:
        print(f"bench_spark: warning: {CHECKOUT} runs plain Python modules (KDISSECT_PURE_PYTHON is set, or "
              f"it has no current compiled build: run tools/build_native.py there): these are not the "
              f"compiled figures", file=sys.stderr, flush=True)
    if args.baseline == "half" and "2 cores" in configurations and not all(halves(halves(files)[0])):
        # (the 2-exports row's baseline: two exports, on a quarter of the archive each)
        raise SystemExit(f"bench_spark: --baseline half with the 2-cores row needs a first half of at least "
                         f"2 files (this archive has {len(files)} files); add --only '1 core'")
    # unmeasured warm-up on the tiny capture: writes the JVM's class-data archive
    # (a cache, like bytecode; see kdissect/spark/session.py) if there is none yet
    _timed([python, "-m", "kdissect", "spark", str(TINY), "-o", str(OUT / f"spark_warmup_{slug}"),
            "--master", "local[1]", "--overwrite"], OUT / f"spark_warmup_{slug}.log")

    def export(inputs: list[str]) -> tuple[float, float]:
        return _measured([python, "-m", "kdissect", "export", *inputs, "-o", str(OUT / f"cli_{slug}.parquet"),
                          "--quiet"], OUT / f"cli_{slug}.log")

    def report(inputs: list[str], name: str) -> tuple[float, float]:
        """`kdissect report` on captures (every table in one pass, then the page) or on a Spark OUTDIR."""
        return _measured([python, "-m", "kdissect", "report", *inputs, "-o", str(OUT / f"{name}.html"), "--quiet"],
                         OUT / f"{name}.log")

    def spark(inputs: list[str], master: str, cpus: set[int] | None, outdir: Path) -> tuple[float, float, float]:
        """(wall seconds, CPU seconds, CPU seconds from the read stage's line on) of a Spark run."""
        wall, cpu, from_read = measured_from(
            [python, "-m", "kdissect", "spark", *inputs, "-o", str(outdir), "--master", master, "--overwrite",
             "--split-size", split_size, *spark_options], OUT / f"{outdir.name}.log", cpus, READ_STAGE_LINE)
        assert from_read is not None
        return wall, cpu, from_read

    def two_exports(sides: tuple[list[str], list[str]]) -> tuple[float, float]:
        """(wall seconds until both end, CPU seconds of both) of two exports at once, one a CPU."""
        def one(index: int) -> tuple[float, float]:
            return _measured([python, "-m", "kdissect", "export", *sides[index], "-o",
                              str(OUT / f"cli_{slug}_half{index}.parquet"), "--quiet"],
                             OUT / f"cli_{slug}_half{index}.log", {index})
        with ThreadPoolExecutor(2) as pool:
            both = list(pool.map(one, (0, 1)))
        return max(wall for wall, _ in both), sum(cpu for _, cpu in both)

    with_two_exports = "2 cores" in configurations
    # the command line doing every table the job writes (nothing to set beside --no-forensic-tables: that is export)
    with_report = not args.no_forensic_tables
    report_ratios: dict[str, dict[str, list[float]]] = {
        config: {"wall": [], "cpu": [], "wall_less_page": [], "cpu_less_page": []} for config in configurations}
    first_half, second_half = halves(files)
    archive_halves = (list(map(str, first_half)), list(map(str, second_half)))
    # the run each archive run is set against ("tiny" in the results either way)
    baseline = [str(TINY)] if args.baseline == "tiny" else archive_halves[0]
    quarters = halves(first_half)
    baseline_halves = ((baseline, baseline) if args.baseline == "tiny"
                       else (list(map(str, quarters[0])), list(map(str, quarters[1]))))
    names = list(configurations) + (["2 exports"] if with_two_exports else [])
    ratios: dict[str, list[float]] = {config: [] for config in names}
    cpu_ratios: dict[str, list[float]] = {config: [] for config in names}
    # Spark's CPU counted from its read stage's line on, in both its runs (READ_STAGE_LINE)
    from_read_ratios: dict[str, list[float]] = {config: [] for config in configurations}
    for round_number in range(args.rounds):
        measured: dict = {"load_average": os.getloadavg()[0]}
        steal = StealClock()
        (tiny_wall, tiny_cpu), (wall, cpu) = export(baseline), export(list(map(str, files)))
        measured["export"] = {"tiny": round(tiny_wall, 2), "archive": round(wall, 2),
                              "tiny_cpu": round(tiny_cpu, 2), "archive_cpu": round(cpu, 2)}
        work_export, cpu_export = wall - tiny_wall, cpu - tiny_cpu
        if with_report:
            (report_tiny, report_tiny_cpu), (report_wall, report_cpu) = (
                report(baseline, f"cli_report_tiny_{slug}"), report(list(map(str, files)), f"cli_report_{slug}"))
            measured["report"] = {"tiny": round(report_tiny, 2), "archive": round(report_wall, 2),
                                  "tiny_cpu": round(report_tiny_cpu, 2), "archive_cpu": round(report_cpu, 2)}
            print(f"round {round_number + 1}: report {report_wall:.1f}s (tiny {report_tiny:.1f}s), CPU "
                  f"{report_cpu:.1f}s (tiny {report_tiny_cpu:.1f}s); export {wall:.1f}s, CPU {cpu:.1f}s", flush=True)
        spark_work: dict[str, tuple[float, float]] = {}
        for config, (master, cpus) in configurations.items():
            outdir = OUT / f"spark_{slug}_{config.replace(' ', '_')}"
            tiny, tiny_cpu, tiny_from_read = spark(baseline, master, cpus, OUT / f"spark_tiny_{slug}")
            seconds, cpu, from_read = spark([str(files[0].parent)], master, cpus, outdir)
            manifest = json.loads((outdir / "manifest.json").read_text())
            ratio = work_export / (seconds - tiny)
            cpu_ratio = cpu_export / (cpu - tiny_cpu)
            from_read_ratio = cpu_export / (from_read - tiny_from_read)
            ratios[config].append(ratio)
            cpu_ratios[config].append(cpu_ratio)
            from_read_ratios[config].append(from_read_ratio)
            spark_work[config] = (seconds - tiny, cpu - tiny_cpu)
            measured[config] = {"tiny": round(tiny, 2), "archive": round(seconds, 2), "vs_export": round(ratio, 3),
                                "tiny_cpu": round(tiny_cpu, 2), "archive_cpu": round(cpu, 2),
                                "cpu_vs_export": round(cpu_ratio, 3),
                                "tiny_cpu_from_read": round(tiny_from_read, 2),
                                "archive_cpu_from_read": round(from_read, 2),
                                "cpu_from_read_vs_export": round(from_read_ratio, 3),
                                "exchanges": manifest["counts"]["exchanges"], "read_tasks": manifest["read_tasks"],
                                "in_range": manifest.get("in_range"), "steps": manifest.get("seconds_since_start_at")}
            print(f"round {round_number + 1}: {config}: {seconds:.1f}s (tiny {tiny:.1f}s), CPU {cpu:.1f}s "
                  f"(tiny {tiny_cpu:.1f}s); export {wall:.1f}s (tiny {tiny_wall:.1f}s), CPU {measured['export']['archive_cpu']:.1f}s "
                  f"(tiny {measured['export']['tiny_cpu']:.1f}s): {ratio:.2f}x export's work by wall time, "
                  f"{cpu_ratio:.2f}x by CPU time ({from_read_ratio:.2f}x from the read stage's line); "
                  f"{manifest['counts']['exchanges']} exchanges, "
                  f"{manifest['read_tasks']} read tasks, in place {manifest.get('in_range')}; "
                  f"load {measured['load_average']:.1f}", flush=True)
        if with_report:
            # the page alone, from the tables the last configuration wrote (the same whatever the master)
            last = OUT / f"spark_{slug}_{list(configurations)[-1].replace(' ', '_')}"
            page_tiny, page_tiny_cpu = report([str(OUT / f"spark_tiny_{slug}")], f"page_tiny_{slug}")
            page_wall, page_cpu = report([str(last)], f"page_{slug}")
            page_work, page_cpu_work = page_wall - page_tiny, page_cpu - page_tiny_cpu
            measured["page"] = {"tiny": round(page_tiny, 2), "archive": round(page_wall, 2),
                                "tiny_cpu": round(page_tiny_cpu, 2), "archive_cpu": round(page_cpu, 2)}
            report_work, report_cpu_work = report_wall - report_tiny, report_cpu - report_tiny_cpu
            for config, (work, cpu_work) in spark_work.items():
                figures = {"wall": report_work / work, "cpu": report_cpu_work / cpu_work,
                           "wall_less_page": (report_work - page_work) / work,
                           "cpu_less_page": (report_cpu_work - page_cpu_work) / cpu_work}
                for measure, value in figures.items():
                    report_ratios[config][measure].append(value)
                measured[config]["vs_report"] = {measure: round(value, 3) for measure, value in figures.items()}
                print(f"round {round_number + 1}: {config} against report's work: {figures['wall']:.2f}x by wall "
                      f"time, {figures['cpu']:.2f}x by CPU time; the page ({page_work:.1f}s, CPU "
                      f"{page_cpu_work:.1f}s) taken out: {figures['wall_less_page']:.2f}x, "
                      f"{figures['cpu_less_page']:.2f}x", flush=True)
        if with_two_exports:
            tiny, tiny_cpu = two_exports(baseline_halves)
            seconds, cpu = two_exports(archive_halves)
            ratio, cpu_ratio = work_export / (seconds - tiny), cpu_export / (cpu - tiny_cpu)
            ratios["2 exports"].append(ratio)
            cpu_ratios["2 exports"].append(cpu_ratio)
            measured["2 exports"] = {"tiny": round(tiny, 2), "archive": round(seconds, 2), "vs_export": round(ratio, 3),
                                     "tiny_cpu": round(tiny_cpu, 2), "archive_cpu": round(cpu, 2),
                                     "cpu_vs_export": round(cpu_ratio, 3)}
            print(f"round {round_number + 1}: 2 exports (half the files each, one CPU each): {seconds:.1f}s "
                  f"(tiny {tiny:.1f}s), CPU {cpu:.1f}s: {ratio:.2f}x export's work by wall time, "
                  f"{cpu_ratio:.2f}x by CPU time", flush=True)
        measured["steal_share"] = steal.share()
        print(f"round {round_number + 1}: {steal_said(measured['steal_share'])} of this machine's CPU time "
              f"taken by its host during the round", flush=True)
        results["rounds"].append(measured)
    cli_exchanges = None
    try:
        import pyarrow.parquet as pq

        cli_exchanges = pq.ParquetFile(OUT / f"cli_{slug}.parquet").metadata.num_rows
    except Exception:
        pass
    results["export_exchanges"] = cli_exchanges
    spark_exchanges = {round_[config]["exchanges"] for round_ in results["rounds"] for config in configurations}
    results["same_rows"] = spark_exchanges == {cli_exchanges}
    print(f"rows: export {cli_exchanges}, Spark {sorted(spark_exchanges)}"
          + ("" if results["same_rows"] else "  ROWS DIFFER"), flush=True)
    for config, values in ratios.items():
        summary = {}
        for measure, found in (("wall", values), ("cpu", cpu_ratios[config])):
            summary[measure], said = _spread(found, "median_vs_export")
            print(f"{config}: by {measure} time, median {said} one export process's work", flush=True)
        if config in from_read_ratios:
            summary["cpu_from_read"], said = _spread(from_read_ratios[config], "median_vs_export")
            print(f"{config}: by CPU time from the read stage's line, median {said} one export process's work",
                  flush=True)
        # the same ratio from each command's median runs (median archive run minus
        # median tiny run): less moved by one round's start-up than a median of ratios
        for measure, archive_key, tiny_key in (("wall", "archive", "tiny"), ("cpu", "archive_cpu", "tiny_cpu")):
            rounds = results["rounds"]
            export_work = _median([r["export"][archive_key] for r in rounds]) - _median([r["export"][tiny_key] for r in rounds])
            spark_work = _median([r[config][archive_key] for r in rounds]) - _median([r[config][tiny_key] for r in rounds])
            summary[measure]["of_median_runs"] = {"export_work_s": round(export_work, 2),
                                                  "spark_work_s": round(spark_work, 2),
                                                  "vs_export": round(export_work / spark_work, 3)}
            print(f"{config}: by {measure} time, of median runs: export's work {export_work:.2f}s, "
                  f"Spark's {spark_work:.2f}s: {export_work / spark_work:.2f}x", flush=True)
        if with_report and config in report_ratios:
            summary["vs_report"] = {}
            for measure, found in report_ratios[config].items():
                summary["vs_report"][measure], said = _spread(found, "median")
                print(f"{config}: against report's work ({measure.replace('_', ' ')}), median {said}", flush=True)
        results[config] = summary
    if with_two_exports:
        # two cores against what this machine's two CPUs gave two independent
        # processes in the same round: that ceiling itself moved 1.01-2.45x
        # between rounds on 2026-11-29
        of_ceiling = [cores / ceiling for cores, ceiling in zip(ratios["2 cores"], ratios["2 exports"])]
        results["2 cores of the ceiling"], said = _spread(of_ceiling, "median")
        print(f"2 cores against 2 exports in the same round (by wall time): median {said}", flush=True)
    shares = [r["steal_share"] for r in results["rounds"] if r["steal_share"] is not None]
    if shares:
        busy = sum(share > STEAL_WARN_SHARE for share in shares)
        results["steal_share"] = {"median": round(_median(shares), 4), "max": round(max(shares), 4),
                                  "rounds_over_warn_share": busy}
        print(f"host steal: median {_median(shares):.1%}, max {max(shares):.1%}; {busy} of {len(shares)} "
              f"rounds over {STEAL_WARN_SHARE:.0%}", flush=True)
    write_result(OUT / f"bench_spark_{slug}.json", json.dumps(results, indent=2) + "\n")
    print(f"results in {OUT / f'bench_spark_{slug}.json'}")


if __name__ == "__main__":
    main()
