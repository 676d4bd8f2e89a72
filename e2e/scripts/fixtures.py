#!/usr/bin/env python3
"""Deterministic benchmark fixtures, checked against e2e/fixtures/manifest.json.

    fixtures.py [--out DIR] [--set smoke|full] [--names A,B] [--record]

Parquet files (an events table: ids, timestamps, a dictionary-encoded category, floats and a
short random string, Snappy-compressed, written by the pinned pyarrow) and incompressible binary
files (SHAKE-256 output). Every value derives from a counter through splitmix64, so the bytes
depend only on the row count and the pinned pyarrow. Existing files whose SHA-256 matches are
kept; others are (re)written and checked. --record writes the hashes into the manifest instead
(after changing a fixture or the pinned versions). Prints `name path` per fixture.
"""
import argparse
import hashlib
import json
import os
import pathlib
import sys

MANIFEST = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "manifest.json"
ROWS_PER_GROUP = 1 << 20
MASK = (1 << 64) - 1


def splitmix64(counter):
    import numpy as np

    with np.errstate(over="ignore"):
        z = counter.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def events(start, count, seed):
    import numpy as np
    import pyarrow as pa

    index = np.arange(start, start + count, dtype=np.uint64)
    r = [splitmix64(index * np.uint64(8) + np.uint64(k) + np.uint64(seed << 40)) for k in range(4)]
    categories = pa.array([f"category-{i:02d}" for i in range(64)])
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz012345", dtype=np.uint8)
    # 16 random characters per row, 5 bits each from two 64-bit words.
    bits = np.stack([(r[3 - (i // 12)] >> np.uint64(5 * (i % 12))) & np.uint64(31) for i in range(16)], axis=1)
    text = letters[bits.astype(np.intp)].tobytes()
    offsets = np.arange(0, 16 * (count + 1), 16, dtype=np.int32)
    return pa.table({
        "id": pa.array(index.astype(np.int64)),
        "ts": pa.array((1_767_225_600_000_000 + index.astype(np.int64) * 1000).astype("datetime64[us]")),
        "user_id": pa.array((r[0] % np.uint64(1_000_000)).astype(np.int32)),
        "category": pa.DictionaryArray.from_arrays(pa.array((r[1] % np.uint64(64)).astype(np.int32)), categories),
        "amount": pa.array((r[2] >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 1000.0),
        "token": pa.StringArray.from_buffers(count, pa.py_buffer(offsets.tobytes()), pa.py_buffer(text)),
    })


def write_parquet(path, rows, seed):
    import pyarrow.parquet as pq

    writer = None
    for start in range(0, rows, ROWS_PER_GROUP):
        table = events(start, min(ROWS_PER_GROUP, rows - start), seed)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema, compression="snappy")
        writer.write_table(table, row_group_size=ROWS_PER_GROUP)
    writer.close()


def write_binary(path, size, seed):
    chunk = 64 << 20
    with open(path, "wb") as out:
        for index, offset in enumerate(range(0, size, chunk)):
            out.write(hashlib.shake_256(f"pgvs3-fixture:{seed}:{index}".encode()).digest(min(chunk, size - offset)))


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.expanduser("~/.cache/pgvs3-fixtures"))
    parser.add_argument("--set", choices=["smoke", "full"], default="full")
    parser.add_argument("--names", help="only these fixtures (comma-separated)")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    manifest = json.loads(MANIFEST.read_text())
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [f for f in manifest["fixtures"] if args.set == "full" or f["set"] == "smoke"]
    if args.names:
        names = args.names.split(",")
        unknown = set(names) - {f["name"] for f in manifest["fixtures"]}
        if unknown:
            sys.exit(f"no such fixtures: {', '.join(sorted(unknown))}")
        wanted = [f for f in manifest["fixtures"] if f["name"] in names]
    for fixture in wanted:
        path = out / fixture["name"]
        if not (path.exists() and sha256(path) == fixture.get("sha256")):
            print(f"writing {path}", file=sys.stderr)
            if fixture["kind"] == "parquet":
                write_parquet(path, fixture["rows"], fixture["seed"])
            else:
                write_binary(path, fixture["size"], fixture["seed"])
            digest = sha256(path)
            if args.record:
                fixture["sha256"], fixture["size"] = digest, path.stat().st_size
            elif digest != fixture.get("sha256"):
                sys.exit(f"{path}: SHA-256 {digest} is not the manifest's {fixture.get('sha256')} "
                         f"(pinned versions: {manifest['generator']})")
        print(fixture["name"], path)
    if args.record:
        MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()
