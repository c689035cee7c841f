"""Benchmark of the Spark job: a >= 1 GB archive, local[1] vs local[2] vs the CLI.

    python3 benchmarks/bench_spark.py [--size-gb 1.0] [--files 6] [--repeat N] [--format pcapng] [SOURCE.pcap ...]

1. Builds (once; kept in benchmarks/out/archive/, not committed) an archive of
   rotated pcap files by replaying the lab captures (captures/*.pcap by
   default) over and over: each replay gets its own loopback addresses
   (127.a.b.c on both ends, so every replayed connection is a new 4-tuple)
   and its times shifted to follow the previous replay. Files are cut at a
   size limit wherever that falls, so connections span files as in a real
   rotated capture. IP/TCP checksums are not recomputed (loopback captures
   carry unverified checksums anyway; nothing here checks them).
2. Runs `kdissect spark` on the same archive in three configurations, each
   in a fresh process:
     1 core     --master local[1], the whole process tree confined to one CPU
                (sched_setaffinity, as `taskset -c 0` does);
     local[1]   --master local[1] on the whole machine;
     2 cores    --master local[2] on the whole machine (2 CPUs here);
   and `kdissect export` (single process). Reports MB/s, the speed-up from one
   to two cores (1 core / 2 cores), local[1] / local[2], and the ratio to the
   CLI (with --repeat, the fastest of N alternating runs of each). Results go
   to benchmarks/out/bench_spark.json.

   With --format pcapng the same archive, rewritten by `editcap -F pcapng`
   (once; benchmarks/out/archive_pcapng/), is measured instead: dumpcap's
   format, cut into byte ranges like pcap.

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
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
sys.path.insert(0, str(REPO))

# bytes before the IPv4 header, per link type
_LINK_HEADER = {0: 4, 1: 14, 101: 0, 108: 4, 113: 16, 228: 0, 276: 20}


def _source_packets(paths: list[str]) -> list[tuple[int, bytes, int, int]]:
    """(relative ts in ns, frame bytes, wire length, offset of the IPv4 header) of the IPv4 packets of all
    sources, one source after another, times made relative and sequential."""
    from kdissect.wire.capture import iter_frames

    packets: list[tuple[int, bytes, int, int]] = []
    clock = 0
    for path in paths:
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
            packets.append((clock + frame.ts - first, data, frame.wire_len - offset + 14, 14))
        if first is not None:
            clock += (last - first) + 10**9
    return packets


def build_archive(sources: list[str], target_bytes: int, files: int, directory: Path) -> list[Path]:
    """Write the archive; returns its files. Reuses an existing archive of the right size."""
    done = directory / "complete.json"
    if done.exists():
        info = json.loads(done.read_text())
        if info.get("target_bytes") == target_bytes and info.get("sources") == sources:
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
        # both ends of every connection of this replay move to 127.a.b.c
        address = bytes((127, (replay // (254 * 256)) % 256, (replay // 254) % 256, 1 + replay % 254))
        shift = start + replay * span
        for ts, data, wire_len, ip in packets:
            if handle is None or size >= per_file:
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
    done.write_text(json.dumps({"target_bytes": target_bytes, "sources": sources,
                                "files": [str(p) for p in written], "replays": replay}))
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
    confine = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    started = time.monotonic()
    with open(log, "w") as out:
        subprocess.run(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=True, preexec_fn=confine)
    return time.monotonic() - started


# name -> (Spark master, CPUs to confine the run to or None)
CONFIGURATIONS = {
    "1 core": ("local[1]", {0}),
    "local[1]": ("local[1]", None),
    "2 cores": ("local[2]", None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sources", nargs="*", help="lab captures to replay (default: captures/*.pcap)")
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--skip-cli", action="store_true", help="do not time the single-process CLI")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each configuration N times, alternating, and keep the fastest "
                             "(the least disturbed by other load on a shared machine)")
    parser.add_argument("--only", action="append", choices=list(CONFIGURATIONS),
                        help="run only this configuration (repeatable)")
    parser.add_argument("--format", choices=["pcap", "pcapng"], default="pcap",
                        help="pcapng: the same archive rewritten by editcap -F pcapng (cut into byte ranges "
                             "like pcap); results in bench_spark_pcapng.json")
    args = parser.parse_args()
    configurations = {name: CONFIGURATIONS[name] for name in (args.only or CONFIGURATIONS)}
    sources = args.sources or sorted(glob.glob(str(REPO / "captures" / "*.pcap")))
    sources = [str(Path(s).resolve()) for s in sources]
    archive_dir = OUT / "archive"
    target = int(args.size_gb * 1e9)
    started = time.monotonic()
    files = build_archive(sources, target, args.files, archive_dir)
    if args.format == "pcapng":
        archive_dir = OUT / "archive_pcapng"
        files = as_pcapng(files, archive_dir)
    total = sum(f.stat().st_size for f in files)
    print(f"archive: {len(files)} files, {total / 1e6:.0f} MB in {archive_dir} "
          f"(built/reused in {time.monotonic() - started:.0f}s)")
    results: dict = {"format": args.format, "archive_bytes": total, "archive_files": len(files), "sources": sources,
                     "cpu_count": os.cpu_count()}
    suffix = "" if args.format == "pcap" else "_" + args.format
    python = sys.executable
    # unmeasured warm-up on a small capture: writes the JVM's class-data archive
    # (a cache, like bytecode; see kdissect/spark/session.py) if there is none yet
    _timed([python, "-m", "kdissect", "spark", str(REPO / "captures" / "admin.pcap"), "-o", str(OUT / "spark_warmup"),
            "--master", "local[1]", "--overwrite"], OUT / "spark_warmup.log")
    runs: dict[str, list[float]] = {name: [] for name in configurations}
    for _ in range(args.repeat):
        for name, (master, cpus) in configurations.items():
            slug = name.replace(" ", "_").replace("[", "").replace("]", "")
            outdir = OUT / f"spark_{slug}{suffix}"
            seconds = _timed([python, "-m", "kdissect", "spark", str(archive_dir), "-o", str(outdir),
                              "--master", master, "--overwrite"], OUT / f"spark_{slug}{suffix}.log", cpus)
            runs[name].append(round(seconds, 1))
            manifest = json.loads((outdir / "manifest.json").read_text())
            print(f"{name} ({master}{', CPUs ' + str(sorted(cpus)) if cpus else ''}): {seconds:.0f}s, "
                  f"{total / 1e6 / seconds:.1f} MB/s, {manifest['counts']['exchanges']} exchanges, "
                  f"{manifest['read_tasks']} read tasks", flush=True)
            best = min(runs[name])
            results[name] = {"master": master, "cpus": sorted(cpus) if cpus else "all", "seconds": best,
                             "mb_per_s": round(total / 1e6 / best, 2), "runs": runs[name],
                             "exchanges": manifest["counts"]["exchanges"], "read_tasks": manifest["read_tasks"],
                             "steps": manifest.get("seconds_since_start_at")}
    if "1 core" in results and "2 cores" in results:
        results["speedup_1_to_2_cores"] = round(results["1 core"]["seconds"] / results["2 cores"]["seconds"], 2)
        print(f"speed-up from one core to two: {results['speedup_1_to_2_cores']}x (goal >= 1.7x)")
    if "local[1]" in results and "2 cores" in results:
        results["speedup_local1_to_local2"] = round(results["local[1]"]["seconds"] / results["2 cores"]["seconds"], 2)
        print(f"local[1] unconfined -> local[2]: {results['speedup_local1_to_local2']}x")
    if not args.skip_cli:
        cli_runs = []
        for _ in range(args.repeat):
            cli_runs.append(round(_timed([python, "-m", "kdissect", "export", *map(str, files),
                                          "-o", str(OUT / "cli.parquet"), "--quiet"], OUT / "cli.log"), 1))
        seconds = min(cli_runs)
        results["cli"] = {"seconds": seconds, "mb_per_s": round(total / 1e6 / seconds, 2), "runs": cli_runs}
        for name in configurations:
            results[name]["vs_cli"] = round(seconds / results[name]["seconds"], 2)
        print(f"single-process export: {seconds:.0f}s, {total / 1e6 / seconds:.1f} MB/s; Spark "
              + ", ".join(f"{name} {results[name]['vs_cli']}x" for name in configurations) + " its speed")
    (OUT / f"bench_spark{suffix}.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"results in {OUT / f'bench_spark{suffix}.json'}")


if __name__ == "__main__":
    main()
