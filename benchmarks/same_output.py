#!/usr/bin/env python3
"""Write what `kdissect export` produces for many captures into a directory,
to compare two versions of the code byte for byte (`diff -r A B`).

    PYTHONPATH=OLD_TREE python3 benchmarks/same_output.py A [extra captures...]
    python3 benchmarks/same_output.py B [extra captures...]
    diff -r A B

For every capture in captures/ (TLS ones with their key logs) and every
impaired variant the tests make of it (tests/support/variants.py: reordered,
duplicated, lossy, cut, snaplen, repeated, VLAN, SLL2, ...), plus any capture
named on the command line: the JSONL rows, the accounting lines and the
reader's problems (as `export` prints them), and the exchanges with their
decoded messages kept (`show`, `stats` and notebooks take that path) reduced
to their row and offsets. Variants are written once into A/variants and
reused from there by later runs (pass the same directory with --variants).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
from pathlib import Path

from bench_files import write_result

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO))  # tests.support (after PYTHONPATH: the code under test comes first)


def export_text(paths: list[str], keylogs: list[str]) -> str:
    from kdissect.shared.output import JsonlWriter
    from kdissect.conn.pipeline import Analysis, fewer_collections

    analysis = Analysis(paths, (9092,), True, False, tls_keylogs=keylogs)
    out = io.StringIO()
    writer = JsonlWriter(out, ts_unit=analysis.ts_unit)
    writer.write_exchanges(analysis)
    lines = analysis.summary_lines() + analysis.read_stats.problems
    return out.getvalue() + "".join(f"# {line}\n" for line in lines)


def kept_text(paths: list[str], keylogs: list[str]) -> str:
    """The exchanges with decoded messages kept: rows, offsets and the messages' reprs hashed."""
    from kdissect.conn.pipeline import Analysis

    analysis = Analysis(paths, (9092,), True, True, tls_keylogs=keylogs)
    lines = []
    for ex in analysis:
        digest = hashlib.sha1(repr((ex.request, ex.response)).encode()).hexdigest()[:12]
        lines.append(repr((tuple(ex.to_row().items()), ex.request_offset, ex.response_offset,
                           ex.request_capture_index, ex.response_capture_index, ex.stream_key,
                           ex.expects_response, digest)))
    return "\n".join(lines + analysis.summary_lines()) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("extra", nargs="*", type=Path, help="more captures (exported, no variants)")
    parser.add_argument("--variants", type=Path, help="directory of variants made by an earlier run")
    parser.add_argument("--no-variants", action="store_true")
    args = parser.parse_args()
    import kdissect
    print("kdissect from", kdissect.__file__, flush=True)
    from tests.support import impair
    from tests.support.variants import VARIANTS, write_variant

    args.out.mkdir(parents=True, exist_ok=True)
    variants_dir = args.variants or args.out / "variants"
    jobs: list[tuple[str, list[str], list[str], bool]] = []
    for pcap in sorted((REPO / "captures").rglob("*.pcap")):
        name = str(pcap.relative_to(REPO / "captures")).replace("/", "__")
        keys = [str(pcap.with_suffix(".keys"))] if pcap.with_suffix(".keys").exists() else []
        jobs.append((name, [str(pcap)], keys, True))
        if args.no_variants:
            continue
        trace = None
        for variant in VARIANTS:
            path = variants_dir / f"{name}.{variant}.pcap"
            if not path.exists():
                variants_dir.mkdir(parents=True, exist_ok=True)
                trace = trace or impair.load_pcap(pcap)
                made = write_variant(trace, variant, variants_dir)
                made.rename(path)
            jobs.append((f"{name}.{variant}", [str(path)], keys, False))
    for extra in args.extra:
        jobs.append((extra.name, [str(extra)], [], False))
    for name, paths, keys, kept in jobs:
        write_result(args.out / f"{name}.jsonl", export_text(paths, keys))
        if kept:
            write_result(args.out / f"{name}.kept", kept_text(paths, keys))
        print(name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
