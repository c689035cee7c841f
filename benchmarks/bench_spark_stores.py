"""Benchmark of the Spark job over S3 (SeaweedFS on loopback) against the same archive on local disk.

    python3 benchmarks/bench_spark_stores.py [--size-mb 200] [--files 4] [--repeat 1] [--small-files 2000]

1. Builds (once) an archive with bench_spark.build_archive (rotated pcap
   files replaying the lab captures; benchmarks/out/archive_stores/), starts
   SeaweedFS (tools/lab/seaweedfs.py) and uploads the archive.
2. Runs `kdissect spark --master local[2]` in a fresh process on the local
   directory, then on its s3:// twin (tables to a local OUTDIR in both, so
   only the reading differs), alternating with --repeat; reports both
   times and the ratio (goal: S3 <= 1.3x local).
3. Listing and pre-pass on --small-files small files (each a slice of a lab
   capture) in S3 and on disk: `expand_inputs` (listing and the format check
   of each file) and `describe_captures` (first packet of each file), the
   driver's work before any task runs.
4. The driver's planning of the archive's files cut into --split-mb ranges,
   in S3: the probe of each split point the job runs (`plan.probe_ranges`)
   against the whole-range pre-pass it keeps for files that fail the check
   after the read (`plan.scan_range` of every range); seconds and bytes fetched.

Results go to benchmarks/out/bench_spark_stores.json. The machine may be
shared: run it when it is otherwise quiet, or expect noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_files import write_result  # noqa: E402


def _timed(command: list[str], env: dict[str, str], log: Path) -> float:
    started = time.monotonic()
    with open(log, "w") as out:
        subprocess.run(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.monotonic() - started


def _small_files(count: int, directory: Path) -> list[Path]:
    """`count` small pcap files: the global header and a few records of a lab capture each."""
    import struct

    directory.mkdir(parents=True, exist_ok=True)
    existing = sorted(directory.glob("*.pcap"))
    if len(existing) == count:
        return existing
    source = (REPO / "captures" / "admin.pcap").read_bytes()
    header, position, records = source[:24], 24, []
    while position + 16 <= len(source) and len(records) < 40:
        caplen = struct.unpack_from("<I", source, position + 8)[0]
        records.append(source[position:position + 16 + caplen])
        position += 16 + caplen
    files = []
    for index in range(count):
        path = directory / f"small-{index:05d}.pcap"
        start = index % max(1, len(records) - 8)
        path.write_bytes(header + b"".join(records[start:start + 8]))
        files.append(path)
    return files


def _prepass(inputs: list[str]) -> tuple[float, int]:
    """Seconds of the driver's listing and per-file first look, and the files found."""
    from kdissect.wire.capture import describe_captures
    from kdissect.shared.inputs import expand_inputs

    started = time.monotonic()
    files, _skipped = expand_inputs(inputs)
    describe_captures(files)
    return time.monotonic() - started, len(files)


def _planning(uris: list[str], split_size: int) -> dict:
    """Seconds and bytes fetched of the probe and of the whole-range pre-pass
    over the same ranges (each after dropping the blocks kept in this process)."""
    from kdissect.spark import plan
    from kdissect.wire import stores

    fetched = [0]
    real_block = stores.RangedFile._block

    def counting(self, *where):
        before = self.bytes_fetched
        data = real_block(self, *where)
        fetched[0] += self.bytes_fetched - before
        return data

    stores.RangedFile._block = counting  # type: ignore[method-assign]
    try:
        planned = plan.plan_splits([(uri, "pcap") for uri in uris], split_size)
        figures = {"ranges": len(planned), "bytes": sum(stores.size(uri) for uri in uris)}
        for name, step in (("probe", lambda: plan.probe_ranges(planned)),
                           ("whole_range_pre_pass", lambda: [plan.scan_range(split)
                                                              for split in plan.ranges_to_scan(planned)])):
            stores.configure(stores.StoreSettings.from_conf())
            fetched[0] = 0
            started = time.monotonic()
            step()
            figures[name] = {"seconds": round(time.monotonic() - started, 2), "bytes_fetched": fetched[0]}
        return figures
    finally:
        stores.RangedFile._block = real_block  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=200)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--small-files", type=int, default=2000)
    parser.add_argument("--skip-job", action="store_true", help="only the listing of the small files")
    parser.add_argument("--split-mb", type=float, default=16, help="range size of the planning figures")
    args = parser.parse_args()

    from bench_spark import build_archive

    from kdissect.wire import stores
    from tools.lab.seaweedfs import s3_server

    sources = sorted(str(p) for p in (REPO / "captures").glob("*.pcap") if p.stat().st_size > 24)
    archive_dir = OUT / "archive_stores"
    files = build_archive(sources, int(args.size_mb * 1e6), args.files, archive_dir)
    total = sum(f.stat().st_size for f in files)
    results: dict = {"archive_bytes": total, "files": len(files), "master": "local[2]"}
    with s3_server() as s3:
        s3.make_bucket("bench")
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda f: s3.upload(f, f"bench/archive/{f.name}"), files))
        env = s3.env("writer")
        env["PYTHONPATH"] = str(REPO)
        times: dict[str, list[float]] = {"local": [], "s3": []}
        for round_ in range(0 if args.skip_job else args.repeat):
            for name, source in (("local", str(archive_dir)), ("s3", "s3://bench/archive")):
                outdir = OUT / f"stores-{name}"
                seconds = _timed([sys.executable, "-m", "kdissect", "spark", source, "-o", str(outdir),
                                  "--master", "local[2]", "--overwrite"], env, OUT / f"bench_stores_{name}.log")
                times[name].append(round(seconds, 2))
                print(f"{name}: {seconds:.1f} s ({total / 1e6 / seconds:.1f} MB/s)", flush=True)
        if not args.skip_job:
            results["seconds"] = times
            results["ratio_s3_to_local"] = round(min(times["s3"]) / min(times["local"]), 3)
            print(f"S3 / local: {results['ratio_s3_to_local']:.2f}x", flush=True)

        small = _small_files(args.small_files, OUT / "small_files")
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda f: s3.upload(f, f"bench/small/{f.name}"), small))
        os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        stores.configure(stores.StoreSettings.from_conf())
        local_seconds, local_count = _prepass([str(OUT / "small_files")])
        s3_seconds, s3_count = _prepass(["s3://bench/small"])
        assert local_count == s3_count == len(small)
        results["small_files"] = {"count": len(small), "local_seconds": round(local_seconds, 2),
                                  "s3_seconds": round(s3_seconds, 2)}
        print(f"listing + first look at {len(small)} small files: local {local_seconds:.2f} s, "
              f"S3 {s3_seconds:.2f} s", flush=True)
        results["planning"] = _planning([f"s3://bench/archive/{f.name}" for f in files], int(args.split_mb * 2**20))
        print(f"planning {len(files)} files cut into {args.split_mb:g} MiB ranges: {results['planning']}", flush=True)
    write_result(OUT / ("bench_spark_stores_listing.json" if args.skip_job else "bench_spark_stores.json"),
                 json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
