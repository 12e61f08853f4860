"""Turn bench/run's figures into the tables `make bench` prints and the
figures section of docs/performance.md.

Each cell (scenario, clients, synchronous_commit, implementation) ran once
per round; the tables show the median over the rounds and the spread
(lowest and highest as a percentage off the median), and every ratio is
a ratio of medians taken from the same rounds."""
import csv
import os
import platform
import statistics
import subprocess
import sys
from collections import defaultdict
from datetime import date

out_dir, doc = sys.argv[1], sys.argv[2]


def rows(name):
    path = os.path.join(out_dir, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in csv.reader(f, delimiter="\t") if r]


def num(text, default=0.0):
    try:
        return float(text)
    except (TypeError, ValueError):
        return default


# results.tsv: scenario, clients, impl, sync, tps, n, failed, wal/tx,
# commits/tx, round, then (claim path only) WAL records/tx, full-page
# image bytes/tx, record bytes/tx.
runs = defaultdict(list)
order = []
for r in rows("results.tsv"):
    r = r + [""] * (13 - len(r))
    scenario, clients, impl, sync, tps, n, failed, wal, commits, rnd, records, fpi, record_bytes = r[:13]
    key = (scenario, clients, sync, impl)
    if key not in runs:
        order.append(key)
    runs[key].append({
        "tps": num(tps), "failed": int(num(failed)), "wal": num(wal), "commits": num(commits),
        "records": num(records, None), "fpi": num(fpi, None), "record_bytes": num(record_bytes, None),
    })


def median(key, field="tps"):
    values = [run[field] for run in runs.get(key, []) if run[field] is not None]
    return statistics.median(values) if values else None


def spread(key):
    values = [run["tps"] for run in runs.get(key, [])]
    if len(values) < 2:
        return ""
    m = statistics.median(values)
    return f"−{(m - min(values)) / m * 100:.0f} / +{(max(values) - m) / m * 100:.0f} %" if m else ""


def ratio(key, base):
    a, b = median(key), median((key[0], key[1], key[2], base))
    return f"{a / b:.2f}" if a and b else ""


def fmt(value, digits=0):
    if value is None:
        return ""
    return f"{value:,.{digits}f}"


lines = [
    "| scenario | clients | sync commit | implementation | TPS (median) | spread | rounds | × limit | × floor | × plpgsql | "
    "WAL bytes/tx | records/tx | FPI bytes/tx | bytes/tx without FPI | commits/tx | failed |",
    "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
for key in order:
    scenario, clients, sync, impl = key
    if scenario in ("drain", "intake", "storm"):
        continue
    failed = sum(run["failed"] for run in runs[key])
    lines.append(
        f"| {scenario} | {clients} | {sync} | {impl} | {fmt(median(key))} | {spread(key)} | {len(runs[key])} | "
        f"{ratio(key, 'limit')} | {ratio(key, 'floor')} | {ratio(key, 'plpgsql') or ratio(key, 'pgcrypto')} | {fmt(median(key, 'wal'))} | "
        f"{fmt(median(key, 'records'), 1)} | {fmt(median(key, 'fpi'))} | {fmt(median(key, 'record_bytes'))} | "
        f"{fmt(median(key, 'commits'), 2)} | {failed} |"
    )
table = "\n".join(lines)


def cells(scenario, impl, base, clients=None, sync=None, field="tps"):
    """(clients, sync, ours ÷ base) over every cell both ran in."""
    out = []
    for (sc, c, s, im) in order:
        if sc != scenario or im != impl or (clients and c != clients) or (sync and s != sync):
            continue
        a, b = median((sc, c, s, im), field), median((sc, c, s, base), field)
        if a is not None and b:
            out.append((c, s, a / b))
    return out


def values(scenario, impl, field, clients=None, sync=None):
    return [(c, s, median((sc, c, s, im), field)) for (sc, c, s, im) in order
            if sc == scenario and im == impl and (not clients or c == clients) and (not sync or s == sync)
            and median((sc, c, s, im), field) is not None]


def span(vals, unit="×", digits=2):
    if not vals:
        return "not run"
    lo, hi = min(v for *_, v in vals), max(v for *_, v in vals)
    same = abs(hi - lo) < 0.5 * 10 ** -digits
    return f"{lo:,.{digits}f}{unit}" if same else f"{lo:,.{digits}f}–{hi:,.{digits}f}{unit}"


def met(vals, goal, at_most=False):
    ok = [v <= goal if at_most else v >= goal for *_, v in vals]
    return f"{sum(ok)} of {len(ok)}" if ok else ""


# webhook_receive against verify + claim, at one client: latency is 1/TPS.
def receive_overhead():
    out = []
    for clients in sorted({c for (sc, c, _, _) in order if sc == "receive"}, key=int):
        get = lambda impl: median(("receive", clients, "off", impl))
        ours, verify, claim = get("ours"), get("verify"), get("claim")
        if ours and verify and claim:
            out.append((clients, "off", (1e6 / ours) - (1e6 / verify) - (1e6 / claim)))
    return out


storm = rows("storm.tsv")  # impl, clients, twice, never
storm_failed = {(c, im): sum(run["failed"] for run in runs[(sc, c, s, im)])
                for (sc, c, s, im) in order if sc == "storm"}

targets = [
    ("new event, one call, 1 client, sync commit off: ≥ 0.95× the INSERT + archive floor",
     cells("new", "ours", "floor", "1", "off"), 0.95, None),
    ("new event, one call, 4 clients, sync commit off: ≥ 0.80× the INSERT + archive floor",
     cells("new", "ours", "floor", "4", "off"), 0.80, None),
    ("new event, one call, 4 clients, sync commit off: ≥ 1.5× PL/pgSQL",
     cells("new", "ours", "plpgsql", "4", "off"), 1.5, cells("new", "limit", "plpgsql", "4", "off")),
    ("new event, one call, 4 clients, sync commit off: ≥ 0.70× limit",
     cells("new", "ours", "limit", "4", "off"), 0.70, None),
    ("new event, one call, 4 clients, sync commit on: ≥ 0.85× limit",
     cells("new", "ours", "limit", "4", "on"), 0.85, None),
    ("handler scenario, new event, sync commit off: ≥ 1.4× PL/pgSQL",
     cells("handler", "ours", "plpgsql", None, "off"), 1.4, cells("handler", "limit", "plpgsql", None, "off")),
    ("archived duplicate, sync commit off: ≥ 2.0× PL/pgSQL",
     cells("dup", "ours", "plpgsql", None, "off"), 2.0, cells("dup", "limit", "plpgsql", None, "off")),
    ("read-only duplicate: ≥ 0.95× limit", cells("dup", "ours_noarchive", "limit"), 0.95, None),
]
# Next to a target against PL/pgSQL, the ceiling the bare INSERT sets in
# the same cells: a ratio the limit itself does not reach cannot be reached
# by anything that writes at least what the limit writes.
target_lines = [
    "| target | ours | met in | the limit in the same cells |",
    "|---|---:|---:|---:|",
]
for name, vals, goal, ceiling in targets:
    target_lines.append(
        f"| {name} | {span(vals)} | {met(vals, goal)} | {f'{span(ceiling)} PL/pgSQL' if ceiling else ''} |")
wal = values("new", "ours", "record_bytes")
target_lines.append(
    f"| WAL per new event without full-page images: ≤ 1.0 kB | {span(wal, ' B', 0)} | "
    f"{met(wal, 1000, True)} | limit: {span(values('new', 'limit', 'record_bytes'), ' B', 0)} |")
for clients in ("4", "16"):
    mine = [r for r in storm if r[0] == "ours" and r[1] == clients]
    twice = sum(int(r[2]) for r in mine)
    never = sum(int(r[3]) for r in mine)
    failed = storm_failed.get((clients, "ours"), 0)
    others = "; ".join(
        f"{r[0]}: {r[2]} twice, {r[3]} never, {storm_failed.get((clients, r[0]), 0)} failed"
        for r in storm if r[1] == clients and r[0] != "ours")
    target_lines.append(
        f"| storm, {clients} clients, lock_timeout 5 ms: 0 twice, 0 never, 0 lock errors | "
        f"{twice} twice, {never} never, {failed} failed | {'yes' if mine and twice == never == failed == 0 else 'no'} | {others} |")
overhead = receive_overhead()
target_lines.append(
    f"| webhook_receive ≤ verify + claim + 10 µs (per call, sync commit off) | "
    f"{span(overhead, ' µs', 0)} over verify + claim | {met(overhead, 10, True)} | |")

# The inbox as a queue (bench/queue), side by side: events per second.
# queue.tsv: cell, workers, impl, round, events/s, events, WAL bytes/event.
queue_runs = defaultdict(list)
queue_order = []
for cell, workers, impl, _round, rate, _n, wal in rows("queue.tsv"):
    if (cell, workers) not in queue_order:
        queue_order.append((cell, workers))
    queue_runs[(cell, workers, impl)].append((num(rate), num(wal)))


def queue_median(cell, workers, impl, at=0):
    values = [run[at] for run in queue_runs.get((cell, workers, impl), [])]
    return statistics.median(values) if values else None


queue_cells = {
    "intake": "intake, a new event per transaction",
    "alone": "drain, nothing else queued",
    "behind": f"drain behind another provider's backlog ({os.environ.get('BENCH_BACKLOG', '200000')} events; pgmq: another queue)",
    "fanout": "drain, 8 consumers fanned out (pgmq: 8 queues)",
}
queue_goals = {"intake": 0.9, "alone": 1.0, "behind": 0.9, "fanout": None}
inbox_lines = [
    "| cell | workers | ours (events/s) | pgmq | hand-written queue | bare INSERT | ours × pgmq | target | "
    "ours × hand-written | WAL bytes/event: ours, pgmq, hand-written |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
]
queue_targets = []
for cell in ("intake", "alone", "behind", "fanout"):
    for workers in sorted({w for (c, w) in queue_order if c == cell}, key=int):
        get = lambda impl, at=0: queue_median(cell, workers, impl, at)
        ours, pgmq, hand, limit = get("ours"), get("pgmq"), get("plpgsql"), get("limit")
        goal = queue_goals[cell]
        if ours and pgmq and goal:
            queue_targets.append((workers, cell, ours / pgmq >= goal))
        inbox_lines.append(
            f"| {queue_cells[cell]} | {workers} | {fmt(ours)} | {fmt(pgmq)} | {fmt(hand)} | {fmt(limit)} | "
            f"{f'{ours / pgmq:.2f}' if ours and pgmq else ''} | {f'≥ {goal:.1f}' if goal else ''} | "
            f"{f'{ours / hand:.2f}' if ours and hand else ''} | "
            f"{', '.join(fmt(get(i, 1)) for i in ('ours', 'pgmq', 'plpgsql'))} |"
        )
depths = sorted({int(c[5:]) for (c, _) in queue_order if c.startswith("depth")})
if len(depths) >= 2:
    shallow, deep = f"depth{depths[0]}", f"depth{depths[-1]}"
    inbox_lines += [
        "",
        f"Draining from the head of a deep queue ({os.environ.get('DEPTH_DRAIN', '5000')} events per run):",
        "",
        f"| workers | implementation | {depths[0]:,} queued (events/s) | {depths[-1]:,} queued | "
        "deep ÷ shallow | target (ours) |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for workers in sorted({w for (c, w) in queue_order if c == deep}, key=int):
        for impl in ("ours", "pgmq"):
            a, b = queue_median(shallow, workers, impl), queue_median(deep, workers, impl)
            if impl == "ours" and a and b:
                queue_targets.append((workers, "depth", b >= a / 1.2))
            inbox_lines.append(
                f"| {workers} | {impl} | {fmt(a)} | {fmt(b)} | {f'{b / a:.2f}' if a and b else ''} | "
                f"{'≥ 0.83 (within 1.2×)' if impl == 'ours' else ''} |")
inbox_table = "\n".join(inbox_lines)
met_queue = sum(ok for *_, ok in queue_targets)
target_lines.append(
    f"| the inbox against pgmq: intake ≥ 0.9×, drain ≥ 1.0× alone and ≥ 0.9× behind a backlog; "
    f"a deep queue drains within 1.2× of a shallow one | see below | "
    f"{met_queue} of {len(queue_targets)} | |")
target_table = "\n".join(target_lines)

storm_lines = ["| clients | implementation | TPS | processed twice | never processed | failed (lock_timeout) |",
               "|---:|---|---:|---:|---:|---:|"]
for impl, clients, twice, never in storm:
    storm_lines.append(f"| {clients} | {impl} | {fmt(median(('storm', clients, 'off', impl)))} | {twice} | {never} | "
                       f"{storm_failed.get((clients, impl), 0)} |")
storm_table = "\n".join(storm_lines)

scale = rows("scale.tsv")
scale_lines = ["| what grows | size | one-call claim, average latency (ms) | archive size |", "|---|---:|---:|---:|"]
for r in scale:
    kind, size, ms, archive = (r + [""] * 4)[:4]
    shown = {"payload": size, "partitions": f"{size} partitions"}.get(kind, f"{int(size):,} events" if size.isdigit() else size)
    scale_lines.append(f"| {kind} | {shown} | {ms} | {archive} |")
scale_table = "\n".join(scale_lines)

purge = rows("purge.tsv")
purge_lines = ["| how | rows | seconds | WAL | WAL per row (bytes) |", "|---|---:|---:|---:|---:|"]
for how, n, secs, wal, per_row in purge:
    what = "partition dropped" if how == "drop" else "rows deleted (default partition)"
    purge_lines.append(f"| {what} | {int(n):,} | {secs} | {int(float(wal)):,} B | {per_row} |")
purge_table = "\n".join(purge_lines)

# metrics.tsv: scenario, clients, metrics (on/off), round, TPS, lock waits
# logged, lock waits the scraper was in.
metric_runs = rows("metrics.tsv")
metrics_lines = ["| scenario | clients | metrics off (TPS) | metrics on (TPS) | on ÷ off | on ÷ off, round by round | lock waits off / on (the scraper's) |",
                 "|---|---:|---:|---:|---:|---:|---:|"]
for scenario in ("new", "handler", "storm"):
    for clients in sorted({r[1] for r in metric_runs if r[0] == scenario}, key=int):
        cell = [r for r in metric_runs if r[0] == scenario and r[1] == clients]
        tps = {m: statistics.median([num(r[4]) for r in cell if r[2] == m] or [0]) for m in ("off", "on")}
        waits = {m: sum(int(num(r[5])) for r in cell if r[2] == m) for m in ("off", "on")}
        mine = sum(int(num((r + ["0"] * 7)[6])) for r in cell if r[2] == "on")
        pairs = [num(a[4]) / num(b[4]) for a in cell for b in cell
                 if a[3] == b[3] and a[2] == "on" and b[2] == "off" and num(b[4])]
        paired = f"{statistics.median(pairs):.3f}" if pairs else "–"
        metrics_lines.append(f"| {scenario} | {clients} | {fmt(tps['off'])} | {fmt(tps['on'])} | "
                             f"{tps['on'] / tps['off']:.3f} | {paired} | {waits['off']} / {waits['on']} ({mine}) |"
                             if tps["off"] else f"| {scenario} | {clients} | – | – | – | – | – |")
metrics_table = "\n".join(metrics_lines)

# steer.tsv: cell, build (baseline, current) or limit, round, events (or
# transactions) per second, events, setting, most leased by a transaction.
steer_runs = rows("steer.tsv")
steer_lines = ["| cell | before steering existed (median) | this build, nothing steered (median) | this ÷ before | round by round (geometric mean, range) |",
               "|---|---:|---:|---:|---:|"]
steer_names = {"intake": "intake, a new event per transaction (TPS)", "drain": "drain, 4 workers (events/s)"}
for cell in ("intake", "drain"):
    runs_of = {b: [r for r in steer_runs if r[0] == cell and r[1] == b] for b in ("baseline", "current")}
    med = {b: statistics.median([num(r[3]) for r in runs_of[b]]) if runs_of[b] else None for b in runs_of}
    pairs = [num(c[3]) / num(b[3]) for c in runs_of["current"] for b in runs_of["baseline"]
             if c[2] == b[2] and num(b[3]) and num(c[3])]
    if med["baseline"] and med["current"] and pairs:
        # The rounds' order alternates: a geometric mean of their ratios
        # cancels what running first or second does to a run.
        steer_lines.append(f"| {steer_names[cell]} | {fmt(med['baseline'])} | {fmt(med['current'])} | "
                           f"{med['current'] / med['baseline']:.3f} | "
                           f"{statistics.geometric_mean(pairs):.3f} ({min(pairs):.2f}–{max(pairs):.2f}) |")
steer_limit_lines = ["| limit | events/s | most leased by one transaction |", "|---|---:|---:|"]
for cell in ("capped", "rated"):
    for r in [r for r in steer_runs if r[0] == cell]:
        steer_limit_lines.append(f"| {r[5]} | {fmt(num(r[3]))} | {r[6]} |")
steer_table = "\n".join(steer_lines) + "\n\nUnder a limit (4 workers asking for 10 each):\n\n" + "\n".join(steer_limit_lines)

# tier.tsv: cell (plain, slot, proxy), round, deliveries per second,
# deliveries, WAL bytes per delivery; tier-storage.tsv: events, archive and
# all bytes per event in the slot.
tier_runs = rows("tier.tsv")
tier_med = {c: statistics.median([num(r[2]) for r in tier_runs if r[0] == c] or [0]) for c in ("plain", "slot", "proxy")}
tier_wal = statistics.median([num(r[4]) for r in tier_runs if r[0] == "plain"] or [0])
tier_storage = (rows("tier-storage.tsv") or [["0", "0", "0"]])[0]
tier_table = ""
if tier_med["slot"]:
    tier_table = (
        "| | deliveries/s (median) | ÷ its slot called directly |\n|---|---:|---:|\n"
        f"| a database of its own | {fmt(tier_med['plain'])} | |\n"
        f"| a slot's database, called directly (its route check included) | {fmt(tier_med['slot'])} | |\n"
        f"| through the proxy, to that slot | {fmt(tier_med['proxy'])} | {tier_med['proxy'] / tier_med['slot']:.2f} |\n\n"
        f"A slot writes **{num(tier_wal) / 1000:.1f} kB of WAL** per delivery and holds "
        f"**{num(tier_storage[2]) / 1000:.1f} kB** per event: the archive {num(tier_storage[1]) / 1000:.1f} kB of it "
        f"(purgeable by day), the rest (event state, queue row, signature binding, their indexes) "
        f"{(num(tier_storage[2]) - num(tier_storage[1])) / 1000:.1f} kB, of which the dedup row stays for good."
    )

pg_version = subprocess.run(["psql", "-X", "-At", "-c", "SHOW server_version"], capture_output=True, text=True).stdout.strip()
settings = subprocess.run(
    ["psql", "-X", "-At", "-c",
     # current_setting, not setting || unit: shared_buffers' unit is 8kB.
     "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name) FROM pg_settings "
     "WHERE name IN ('shared_buffers', 'max_wal_size', 'wal_level', 'fsync', 'full_page_writes', 'autovacuum')"],
    capture_output=True, text=True).stdout.strip()
# The portable edition (bench/portable): its one call against the
# hand-written PL/pgSQL, its drains against pgmq, and the compiled
# edition's lead over it, cell by cell, from the same run.
# portable.tsv: cell, clients, impl, sync, round, rate.
portable_runs = defaultdict(list)
for cell, clients, impl, sync, _round, rate in rows("portable.tsv"):
    portable_runs[(cell, clients, impl, sync)].append(num(rate))


def portable_median(cell, clients, impl, sync):
    values = portable_runs.get((cell, clients, impl, sync), [])
    return statistics.median(values) if values else None


portable_lines = [
    "| cell | clients | portable | hand-written PL/pgSQL or pgmq | portable × that | target | compiled | "
    "compiled × portable |",
    "|---|---:|---:|---:|---:|---:|---:|---:|",
]
for cell, sync, base, goal, label in (
    ("new", "on", "plpgsql", 1.0, "a new event per transaction, one call (synchronous_commit on)"),
    ("new", "off", "plpgsql", 1.0, "a new event per transaction, one call (synchronous_commit off)"),
    ("alone", "off", "pgmq", 0.8, "drain, nothing else queued (events/s)"),
    ("behind", "off", "pgmq", 0.8, "drain behind another provider's backlog (events/s)"),
):
    for clients in ("1", "4"):
        mine = portable_median(cell, clients, "portable", sync)
        other = portable_median(cell, clients, base, sync)
        compiled = (median((cell, clients, sync, "ours_complete")) if cell == "new"
                    else queue_median(cell, clients, "ours"))
        if mine is None:
            continue
        portable_lines.append(
            f"| {label} | {clients} | {fmt(mine)} | {fmt(other)} | "
            f"{f'{mine / other:.2f}' if other else ''} | ≥ {goal:.1f} | {fmt(compiled)} | "
            f"{f'{compiled / mine:.2f}' if compiled else ''} |"
        )
portable_table = "\n".join(portable_lines) if len(portable_lines) > 2 else ""

# ingress.tsv: cell (direct, ingress), senders, round, deliveries per
# second, deliveries, p50 ms, p99 ms.
ingress_runs = rows("ingress.tsv")


def ingress_median(cell, senders, column):
    values = [num(r[column]) for r in ingress_runs if r[0] == cell and r[1] == senders]
    return statistics.median(values) if values else None


ingress_lines = [
    "| concurrent senders | direct `webhook_receive` (deliveries/s) | through webhook-ingress | ingress × direct | "
    "target | p50 / p99 direct (ms) | p50 / p99 through the ingress (ms) |",
    "|---:|---:|---:|---:|---:|---:|---:|",
]
for senders in ("4", "16"):
    direct_rate, front_rate = ingress_median("direct", senders, 3), ingress_median("ingress", senders, 3)
    if not direct_rate or not front_rate:
        continue
    ingress_lines.append(
        f"| {senders} | {fmt(direct_rate)} | {fmt(front_rate)} | {front_rate / direct_rate:.2f} | ≥ 0.8 | "
        f"{ingress_median('direct', senders, 5):.1f} / {ingress_median('direct', senders, 6):.1f} | "
        f"{ingress_median('ingress', senders, 5):.1f} / {ingress_median('ingress', senders, 6):.1f} |"
    )
examples_present = [c for c in ("python", "node", "rust") if any(r[0] == c for r in ingress_runs)]
if len(ingress_lines) > 2 and examples_present:
    ingress_lines += [
        "",
        "The example receivers' inbox endpoints (examples/, pools of 8 connections) under the same load, "
        "deliveries/s (p99 ms):",
        "",
        "| concurrent senders | webhook-ingress | " + " | ".join(examples_present) + " |",
        "|---:|---:|" + "---:|" * len(examples_present),
    ]
    for senders in ("4", "16"):
        cells = [
            f"{fmt(ingress_median(c, senders, 3))} ({ingress_median(c, senders, 6):.1f})"
            if ingress_median(c, senders, 3) else ""
            for c in ["ingress"] + examples_present
        ]
        ingress_lines.append(f"| {senders} | " + " | ".join(cells) + " |")
pooled_present = [c for c in ("ingress-transaction", "ingress-pgbouncer") if any(r[0] == c for r in ingress_runs)]
if len(ingress_lines) > 2 and pooled_present:
    ingress_lines += [
        "",
        "Behind a transaction pooler: the ingress with `--pooler transaction` (each delivery an unnamed "
        "statement, nothing set for the session), to the server and through PgBouncer in transaction mode "
        "(8 server connections), deliveries/s (× the ingress with its defaults):",
        "",
        "| concurrent senders | webhook-ingress | --pooler transaction | through PgBouncer |",
        "|---:|---:|---:|---:|",
    ]
    for senders in ("4", "16"):
        base = ingress_median("ingress", senders, 3)
        cells = [
            f"{fmt(ingress_median(c, senders, 3))} ({ingress_median(c, senders, 3) / base:.2f})"
            if base and ingress_median(c, senders, 3) else ""
            for c in ("ingress-transaction", "ingress-pgbouncer")
        ]
        ingress_lines.append(f"| {senders} | {fmt(base)} | " + " | ".join(cells) + " |")
ingress_table = "\n".join(ingress_lines) if len(ingress_lines) > 2 else ""

# public_keys.tsv: cell, edition, round, per second.
pk_runs = defaultdict(list)
for cell, edition, _round, rate in rows("public_keys.tsv"):
    pk_runs[(cell, edition)].append(num(rate))
PK_CELLS = [
    ("verify-ed25519", "Ed25519 verification (Discord, Standard Webhooks `v1a`)", 25),
    ("verify-p256", "ECDSA P-256 verification (SendGrid)", 25),
    ("verify-rsa2048", "RSA-2048 verification (PayPal, its certificate read)", None),
    ("check-rsa2048", "RSA-2048 check of a registered PayPal key, as `webhook_receive` makes it", 3),
    ("receive-discord", "`webhook_receive` of a new Discord interaction", None),
    ("receive-sendgrid", "`webhook_receive` of a new SendGrid batch", None),
    ("receive-paypal", "`webhook_receive` of a new PayPal event", None),
]
pk_lines = [
    "| cell | compiled (per second) | portable (per second) | portable, ms each | target (portable) |",
    "|---|---:|---:|---:|---:|",
]
for cell, label, target in PK_CELLS:
    compiled = statistics.median(pk_runs[(cell, "compiled")]) if pk_runs[(cell, "compiled")] else None
    portable = statistics.median(pk_runs[(cell, "portable")]) if pk_runs[(cell, "portable")] else None
    if not portable:
        continue
    pk_lines.append(f"| {label} | {fmt(compiled) if compiled else '—'} | {fmt(portable)} | {1000 / portable:.1f} | "
                    f"{f'≤ {target} ms' if target else ''} |")
pk_table = "\n".join(pk_lines) if len(pk_lines) > 2 else ""

machine = f"{os.cpu_count()} cores, {platform.machine()}, PostgreSQL {pg_version}; {settings}"
rounds = max((len(v) for v in runs.values()), default=0)

print(table)
print()
print(target_table)
print()
print(inbox_table)
print()
print(storm_table)
print()
print(scale_table)
print()
print(purge_table)
print()
print(metrics_table)
print()
print(steer_table)
print()
print(tier_table)
print()
print(portable_table)
print()
print(ingress_table)

if os.path.exists(doc):
    with open(doc) as f:
        text = f.read()
    block = (
        "<!-- figures:start -->\n"
        f"Produced by `make bench` on {date.today().isoformat()} ({machine}), "
        f"{os.environ.get('BENCH_SECONDS', '10')} s per run, {rounds} interleaved rounds.\n\n"
        f"{table}\n\n**Targets**, each over every cell it applies to (medians):\n\n{target_table}\n\n"
        f"**The inbox as a queue** (synchronous_commit off, 1 kB payloads; a drain transaction leases ten events, "
        f"writes a side effect for each and finishes the ten in one call; {os.environ.get('DRAIN_EVENTS', '40000')} "
        f"events per consumer and run):\n\n{inbox_table}\n\n"
        f"**Storm**, 16 near-simultaneous deliveries of each event, synchronous_commit off, lock_timeout 5 ms:\n\n{storm_table}\n\n"
        f"**How it scales** (1 client, synchronous_commit on):\n\n{scale_table}\n\n"
        f"**Purging a day of the archive** (`webhook_purge`, every event processed, after a checkpoint):\n\n{purge_table}\n\n"
        f"**What the metrics cost** (bench/metrics: synchronous_commit off, {os.environ.get('BENCH_METRICS_SECONDS', '20')} s "
        f"per run, medians of interleaved rounds; on: `webhook_metrics()` every {os.environ.get('BENCH_SCRAPE_EVERY', '5')} s "
        f"and `webhook_alerts_evaluate()` every minute; lock waits over 10 ms logged):\n\n{metrics_table}\n\n"
        f"**What steering costs** (bench/steer: synchronous_commit off, medians of "
        f"{os.environ.get('BENCH_STEER_ROUNDS', '6')} interleaved rounds, this build's library and the one before "
        f"steering swapped between runs; nothing paused or limited):\n\n{steer_table}\n\n"
        f"**The intake tier's proxy** (bench/tier: synchronous_commit off, 4 clients, a new signed Stripe "
        f"delivery per call; see [scale-out.md](scale-out.md)):\n\n{tier_table}\n\n"
        f"**The portable edition** (bench/portable, in a database of its own, installed from its plain script; "
        f"see [managed.md](managed.md)):\n\n{portable_table}\n"
        + (f"\n**The HTTP front door** (bench/ingress: a new signed GitHub delivery per request, 1 kB, inbox mode, "
           f"synchronous_commit off; wrk over loopback keep-alive connections against pgbench calling "
           f"`webhook_receive` with the same deliveries over one connection per sender, the ingress with its defaults (8 connections); medians of "
           f"{os.environ.get('BENCH_INGRESS_ROUNDS', '3')} interleaved rounds; see [ingress.md](ingress.md)):"
           f"\n\n{ingress_table}\n" if ingress_table else "")
        + "<!-- figures:end -->"
    )
    start, end = text.find("<!-- figures:start -->"), text.find("<!-- figures:end -->")
    if start >= 0 and end >= 0:
        text = text[:start] + block + text[end + len("<!-- figures:end -->"):]
        with open(doc, "w") as f:
            f.write(text)

# The public-key checks, in a block of their own (bench/public_keys may
# run alone).
if pk_table and os.path.exists(doc):
    with open(doc) as f:
        text = f.read()
    start, end = text.find("<!-- public-keys:start -->"), text.find("<!-- public-keys:end -->")
    if start >= 0 and end >= 0:
        text = (text[:start] + "<!-- public-keys:start -->\n"
                + f"Produced by bench/public_keys on {date.today().isoformat()} ({machine}), one client, "
                f"{os.environ.get('BENCH_SECONDS', '10')} s per verification run, medians of "
                f"{max((len(v) for v in pk_runs.values()), default=0)} rounds:\n\n" + pk_table + "\n" + text[end:])
        with open(doc, "w") as f:
            f.write(text)

# The capacity model's inputs, in the scale-out guide.
scale_doc = os.path.join(os.path.dirname(doc), "scale-out.md")
if tier_table and os.path.exists(scale_doc):
    with open(scale_doc) as f:
        text = f.read()
    start, end = text.find("<!-- tier:start -->"), text.find("<!-- tier:end -->")
    if start >= 0 and end >= 0:
        text = text[:start] + "<!-- tier:start -->\n" + tier_table + "\n" + text[end:]
        with open(scale_doc, "w") as f:
            f.write(text)
