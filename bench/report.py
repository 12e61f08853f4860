"""Turn bench/run's figures into the table `make bench` prints and the
figures section of docs/performance.md."""
import csv
import os
import platform
import subprocess
import sys
from datetime import date

out_dir, doc = sys.argv[1], sys.argv[2]


def rows(name):
    path = os.path.join(out_dir, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in csv.reader(f, delimiter="\t") if r]


results = rows("results.tsv")
by_key = {}
for scenario, clients, impl, sync, tps, n, failed, wal, commits in results:
    by_key[(scenario, clients, sync, impl)] = (float(tps or 0), int(failed or 0), wal, commits)

lines = [
    "| scenario | clients | sync commit | implementation | TPS | × limit | × plpgsql | × pgcrypto | WAL bytes/tx | commits/tx | failed |",
    "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
]
for scenario, clients, impl, sync, tps, n, failed, wal, commits in results:
    def ratio(base):
        b = by_key.get((scenario, clients, sync, base))
        return f"{float(tps) / b[0]:.2f}" if b and b[0] else ""
    lines.append(
        f"| {scenario} | {clients} | {sync} | {impl} | {float(tps):,.0f} | {ratio('limit')} | "
        f"{ratio('plpgsql')} | {ratio('pgcrypto')} | {wal} | {commits} | {failed} |"
    )
table = "\n".join(lines)

storm = rows("storm_duplicates.tsv")
storm_text = "\n".join(f"- {impl}: {dups} events with more than one side effect" for impl, dups in storm)

scale = rows("scale.tsv")
scale_lines = ["| what grows | size | claim + complete, average latency (ms) |", "|---|---:|---:|"]
scale_lines += [f"| {kind} | {size if kind == 'payload' else f'{int(size):,} events'} | {ms} |" for kind, size, ms in scale]
scale_table = "\n".join(scale_lines)

pg_version = subprocess.run(["psql", "-X", "-At", "-c", "SHOW server_version"], capture_output=True, text=True).stdout.strip()
settings = subprocess.run(
    ["psql", "-X", "-At", "-c",
     "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', ' ORDER BY name) FROM pg_settings "
     "WHERE name IN ('shared_buffers', 'max_wal_size', 'wal_level', 'fsync', 'full_page_writes')"],
    capture_output=True, text=True).stdout.strip()
machine = f"{os.cpu_count()} cores, {platform.machine()}, PostgreSQL {pg_version}; {settings}"

print(table)
print()
print("Storm (4 clients, 16 deliveries of each event):")
print(storm_text)
print()
print(scale_table)

if os.path.exists(doc):
    with open(doc) as f:
        text = f.read()
    block = (
        "<!-- figures:start -->\n"
        f"Produced by `make bench` on {date.today().isoformat()} ({machine}), "
        f"{os.environ.get('BENCH_SECONDS', '10')} s per run.\n\n"
        f"{table}\n\n**Storm**, 4 clients, 16 near-simultaneous deliveries of each event:\n\n{storm_text}\n\n"
        f"**How it scales** (1 client, synchronous_commit on):\n\n{scale_table}\n"
        "<!-- figures:end -->"
    )
    start, end = text.find("<!-- figures:start -->"), text.find("<!-- figures:end -->")
    if start >= 0 and end >= 0:
        text = text[:start] + block + text[end + len("<!-- figures:end -->"):]
        with open(doc, "w") as f:
            f.write(text)
