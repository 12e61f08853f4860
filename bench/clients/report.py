"""Writes bench/clients' figures (one JSON line per language) into
docs/performance.md, between <!-- clients:start --> and <!-- clients:end -->.
``python3 report.py BENCH_JSONL DOC DELIVERIES ROUNDS``"""
import json
import sys

lines, doc, n, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = [json.loads(line) for line in open(lines) if line.strip()]
table = [f"Each language: {rounds} rounds of {n} signed Stripe deliveries each way, one after another on one "
         "connection, the two taking turns, each going first in every other round; the median of each. The work: one INSERT.", "",
         "| package | through the package | by hand | ratio |", "|---|---|---|---|"]
table += [f"| {r['language']} | {r['package']:,}/s | {r['by_hand']:,}/s | {r['ratio']:.3f} |" for r in rows]
block = "<!-- clients:start -->\n" + "\n".join(table) + "\n<!-- clients:end -->"
text = open(doc).read()
start, end = text.find("<!-- clients:start -->"), text.find("<!-- clients:end -->")
if start < 0 or end < 0:
    sys.exit(f"{doc} has no clients block")
open(doc, "w").write(text[:start] + block + text[end + len("<!-- clients:end -->"):])
print("\n".join(table))
# The target: each package within 5 % of its hand-written twin. A
# measurement, not a test: the figures are written either way.
under = [r["language"] for r in rows if r["ratio"] < 0.95]
if under:
    print("under the target of 95 % of the handler by hand: " + ", ".join(under))
