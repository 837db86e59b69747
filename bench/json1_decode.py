"""Decode throughput of ``runner.json1.loads`` next to plain ``orjson.loads``.

Run ``python bench/json1_decode.py``. It builds deterministic documents of realistic
records (nested objects with strings, ints, floats, booleans, nulls and arrays) of about
200 B, 64 KiB, 1 MiB and 16 MiB, decodes each with both functions in alternation, and
prints the median (and best) MB/s and the ratio json1 / orjson. The stdlib-only path
(``runner.json1._loads_pure``, what component images run) is shown for reference.

The 16 MiB document must stay within JSON/1's 262,144 values, so its records carry a
longer text field; the "dense" row has short texts and more values per byte. Documents are
written by orjson (so they are in its compact form, the common case on the wire) except
the "indented" row, written by the stdlib with ``indent=1`` and ASCII escapes, which takes
json1's slower general check for duplicates and number tokens.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from runner import json1

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "café",
    "naïve",
    "straße",
    "東京",
    "😀",
    "https://example.org/a:b",
    "12:30",
    'quote"',
    "tab\t",
]
# label, target size, words of text per record, writer
ROWS = [
    ("200 B", 200, 0, orjson.dumps),
    ("64 KiB", 65_536, 40, orjson.dumps),
    ("1 MiB", 1 << 20, 40, orjson.dumps),
    ("1 MiB dense", 1 << 20, 2, orjson.dumps),
    ("1 MiB indented", 1 << 20, 40, lambda value: json.dumps(value, indent=1).encode()),
    ("16 MiB", 16 << 20, 300, orjson.dumps),
]


def record(rng: random.Random, index: int, words: int) -> dict[str, Any]:
    """One customer-like record: about 30 values (6 when ``words`` is 0)."""
    if not words:
        return {"id": index, "name": f"user-{index:06d}", "score": 87.25, "tags": ["a", "b"]}
    return {
        "id": index,
        "name": f"user-{index:06d}",
        "email": f"user{index}@example.org",
        "active": rng.random() < 0.7,
        "score": round(rng.uniform(0, 100), 3),
        "balance": rng.randint(-(10**9), 10**9),
        "tags": rng.sample(WORDS, 3),
        "address": {
            "street": f"{rng.randint(1, 999)} {rng.choice(WORDS)} street",
            "city": rng.choice(WORDS),
            "zip": f"{rng.randint(10000, 99999)}",
            "geo": [rng.uniform(-90, 90), rng.uniform(-180, 180)],
        },
        "history": [
            {
                "ts": 1_700_000_000_000 + rng.randint(0, 10**9),
                "amount": round(rng.uniform(-500, 500), 2),
                "note": " ".join(rng.choices(WORDS, k=rng.randint(2, 12))),
            }
            for _ in range(rng.randint(0, 4))
        ],
        "bio": " ".join(rng.choices(WORDS, k=rng.randint(words // 2, words * 3 // 2))),
        "parent": None,
    }


def document(size: int, words: int, write: Callable[[object], bytes]) -> bytes:
    """The largest export of records that ``write`` keeps within ``size`` bytes."""
    rng = random.Random(size + words)
    records: list[dict[str, Any]] = []
    room = size - len(write({"kind": "export", "version": 1, "records": []}))
    while True:
        candidate = record(rng, len(records), words)
        cost = len(write([candidate])) - 1
        if cost > room and records:
            break
        records.append(candidate)
        room -= cost
    return write({"kind": "export", "version": 1, "records": records})


def timings(decoders: dict[str, Callable[[bytes], object]], doc: bytes) -> dict[str, list[float]]:
    """Seconds per decode, the decoders alternating, for about two seconds per decoder."""
    results: dict[str, list[float]] = {name: [] for name in decoders}
    start = time.perf_counter()
    while len(results["orjson"]) < 5 or time.perf_counter() - start < 2 * len(decoders):
        for name, decode in decoders.items():
            began = time.perf_counter()
            decode(doc)
            results[name].append(time.perf_counter() - began)
        if len(results["orjson"]) >= 2000:
            break
    return results


def main() -> None:
    decoders: dict[str, Callable[[bytes], object]] = {
        "json1": json1.loads,
        "orjson": orjson.loads,
        "pure": json1._loads_pure,
    }
    header = "| document | bytes | values | json1 MB/s | orjson MB/s | ratio | pure MB/s |"
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, size, words, write in ROWS:
        doc = document(size, words, write)
        values = count_values(json1.loads(doc))
        results = timings(decoders, doc)
        median = {name: len(doc) / statistics.median(ts) / 1e6 for name, ts in results.items()}
        best = {name: len(doc) / min(ts) / 1e6 for name, ts in results.items()}
        print(
            f"| {label} | {len(doc):,} | {values:,} "
            f"| {median['json1']:.0f} (best {best['json1']:.0f}) "
            f"| {median['orjson']:.0f} (best {best['orjson']:.0f}) "
            f"| {median['json1'] / median['orjson']:.2f} "
            f"| {median['pure']:.0f} |"
        )


def count_values(value: object) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(count_values, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(count_values, value))
    return 1


if __name__ == "__main__":
    main()
