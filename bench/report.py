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


# The targets the hot path is held to, each over every cell it applies to,
# next to the ceiling the bare INSERT sets in the same cells: a ratio
# against plpgsql that the limit itself does not reach cannot be reached by
# anything that writes at least what the limit writes.
def cells(scenario, impl, base, metric="tps"):
    out = []
    for (sc, clients, sync, im), (tps, _, wal, _) in sorted(by_key.items()):
        if sc != scenario or im != impl:
            continue
        b = by_key.get((sc, clients, sync, base))
        if not b:
            continue
        if metric == "tps" and b[0]:
            out.append((clients, sync, tps / b[0]))
        elif metric == "wal" and wal and b[2] and float(b[2]):
            out.append((clients, sync, float(wal) / float(b[2])))
    return out


def span(values):
    if not values:
        return "not run"
    lo, hi = min(v for *_, v in values), max(v for *_, v in values)
    return f"{lo:.2f}×" if abs(hi - lo) < 0.005 else f"{lo:.2f}–{hi:.2f}×"


def met(values, goal, at_most=False):
    ok = [v <= goal if at_most else v >= goal for *_, v in values]
    return f"{sum(ok)} of {len(ok)} runs"


targets = [
    ("new event ≥ 2.0× plpgsql", cells("new", "ours", "plpgsql"), 2.0, False, cells("new", "limit", "plpgsql")),
    ("new event ≥ 0.6× limit", cells("new", "ours", "limit"), 0.6, False, None),
    ("duplicate ≥ 2.0× plpgsql", cells("dup", "ours", "plpgsql"), 2.0, False, cells("dup", "limit", "plpgsql")),
    ("read-only duplicate ≥ 0.9× limit", cells("dup", "ours_noarchive", "limit"), 0.9, False, None),
    ("verify 1 kB ≥ 1.0× pgcrypto", cells("verify1k", "ours", "pgcrypto"), 1.0, False, None),
    ("verify 64 kB ≥ 1.0× pgcrypto", cells("verify64k", "ours", "pgcrypto"), 1.0, False, None),
    ("WAL per new event ≤ 0.7× plpgsql", cells("new", "ours", "plpgsql", "wal"), 0.7, True, None),
]
target_lines = [
    "| target | ours | met in | limit × plpgsql in the same runs |",
    "|---|---:|---:|---:|",
]
for name, values, goal, at_most, ceiling in targets:
    target_lines.append(
        f"| {name} | {span(values)} | {met(values, goal, at_most) if values else ''} | "
        f"{span(ceiling) if ceiling else ''} |"
    )
storm_failed = sum(int(failed) for (sc, _, _, im), (_, failed, _, _) in by_key.items() if sc == "storm" and im == "ours")
storm_dups = sum(int(d) for impl, d in rows("storm_duplicates.tsv") if impl == "ours")
target_lines.append(
    f"| storm: no duplicated side effect, no claim waiting | {storm_dups} duplicated, "
    f"{storm_failed} failed (lock_timeout 1 s) | {'yes' if storm_dups == 0 and storm_failed == 0 else 'no'} | |"
)
target_table = "\n".join(target_lines)

# The inbox, side by side: events per second.
inbox_lines = [
    "| inbox | clients | ours (events/s) | hand-written PL/pgSQL queue | bare INSERT … ON CONFLICT | ours × PL/pgSQL | receive, verified (events/s) |",
    "|---|---:|---:|---:|---:|---:|---:|",
]
for scenario, what in (("drain", "drain, 10 per transaction"), ("intake", "intake, new event")):
    for clients in sorted({c for (sc, c, _, _) in by_key if sc == scenario}, key=int):
        get = lambda impl: by_key.get((scenario, clients, "on", impl), (0,))[0]
        ours, plpgsql, limit, receive = get("ours"), get("plpgsql"), get("limit"), get("receive")
        inbox_lines.append(
            f"| {what} | {clients} | {ours:,.0f} | {plpgsql:,.0f} | {f'{limit:,.0f}' if limit else ''} | "
            f"{f'{ours / plpgsql:.2f}' if plpgsql else ''} | {f'{receive:,.0f}' if receive else ''} |"
        )
inbox_table = "\n".join(inbox_lines)

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
     "WHERE name IN ('shared_buffers', 'max_wal_size', 'wal_level', 'fsync', 'full_page_writes', 'autovacuum')"],
    capture_output=True, text=True).stdout.strip()
machine = f"{os.cpu_count()} cores, {platform.machine()}, PostgreSQL {pg_version}; {settings}"

print(table)
print()
print(target_table)
print()
print(inbox_table)
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
        f"{table}\n\n**Targets**, each over every run it applies to:\n\n{target_table}\n\n**The inbox** (synchronous_commit on; the drain leases, writes a side effect for and completes ten events per transaction):\n\n{inbox_table}\n\n**Storm**, 4 clients, 16 near-simultaneous deliveries of each event:\n\n{storm_text}\n\n"
        f"**How it scales** (1 client, synchronous_commit on):\n\n{scale_table}\n"
        "<!-- figures:end -->"
    )
    start, end = text.find("<!-- figures:start -->"), text.find("<!-- figures:end -->")
    if start >= 0 and end >= 0:
        text = text[:start] + block + text[end + len("<!-- figures:end -->"):]
        with open(doc, "w") as f:
            f.write(text)
