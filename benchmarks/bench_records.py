"""Records decoded per second, for each message format and codec.

    python3 benchmarks/bench_records.py [--records-per-batch 200] [--batches 50] [--value-size 100]

Batches are built with kdissect's own encoder (realistic text-like values,
keys and one header on magic 2), then decoded with `decode_records`; the best
of three runs is reported, in CPU time
(process_time: the figures stay meaningful on a busy machine). `batch_counts` (header-only, as the exchange table
uses it) is measured on the same data, in wire MiB/s.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kdissect.records import batch_counts, decode_records  # noqa: E402
from kdissect.records.encode import encode_message_set, encode_record_batch  # noqa: E402
from kdissect.records.model import Record  # noqa: E402

CASES = [(2, c) for c in ("none", "gzip", "snappy", "lz4", "zstd")] + [
    (m, c) for m in (1, 0) for c in ("none", "gzip", "snappy", "lz4")]


def make_records(count: int, value_size: int, rng: random.Random) -> list[Record]:
    words = [b"order", b"user", b"paid", b"shipped", b"amount", b"eur", b"id", b"ok"]
    out = []
    for i in range(count):
        value = b" ".join(rng.choice(words) for _ in range(value_size // 5))[:value_size]
        out.append(Record(0, 1_700_000_000_000 + i, f"key-{i % 97}".encode(), value, [("src", b"bench")]))
    return out


def build(magic: int, codec: str, batches: int, per_batch: int, value_size: int) -> bytes:
    rng = random.Random(7)
    parts = []
    for b in range(batches):
        records = make_records(per_batch, value_size, rng)
        if magic == 2:
            parts.append(encode_record_batch(records, codec, base_offset=b * per_batch))
        else:
            parts.append(encode_message_set(records, magic, codec, base_offset=b * per_batch))
    return b"".join(parts)


def best_of(runs: int, func) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        func()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records-per-batch", type=int, default=200)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--value-size", type=int, default=100)
    args = parser.parse_args()
    total = args.batches * args.records_per_batch
    print(f"{total} records per case, {args.records_per_batch} per batch, values of {args.value_size} bytes")
    print(f"{'magic':>5} {'codec':<7} {'wire KiB':>9} {'records/s':>11} {'MiB/s (uncompr.)':>17} {'batch_counts MiB/s':>19}")
    for magic, codec in CASES:
        raw = build(magic, codec, args.batches, args.records_per_batch, args.value_size)
        decoded = decode_records(raw)
        assert sum(len(b.records) for b in decoded) == total and not decoded.all_problems()
        uncompressed = sum(b.uncompressed_bytes or 0 for b in decoded)
        seconds = best_of(3, lambda: decode_records(raw))
        count_seconds = best_of(3, lambda: batch_counts(raw))
        print(f"{magic:>5} {codec:<7} {len(raw) / 1024:>9.0f} {total / seconds:>11,.0f} "
              f"{uncompressed / seconds / 2**20:>17.1f} {len(raw) / count_seconds / 2**20:>19,.0f}")


if __name__ == "__main__":
    main()
