"""The metrics and alerts through the components operators run: Debian's
prometheus-postgres-exporter with the shipped query file, Debian's
Prometheus scraping it (with the shipped rules), pg_cron evaluating the
alerts, and the example relay posting them to a stand-in chat webhook;
and webhook-ingress (INGRESS_BIN) scraped by the same Prometheus with the
shipped configuration.

Run by .ci/observability-test against a throwaway server (PGHOST, PGPORT).
A known mix of deliveries goes in; what Prometheus's HTTP API answers must
equal it, series by series.
"""

import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MONITORING = os.path.join(ROOT, "examples", "monitoring")
HOST, PORT = os.environ["PGHOST"], os.environ["PGPORT"]
EXPORTER_PORT, PROMETHEUS_PORT, CHAT_PORT, INGRESS_PORT = (
    int(p) for p in os.environ["OBSERVABILITY_PORTS"].split(","))
WITH_CRON = os.environ.get("WITH_CRON") == "1"


def dsn(user, db="postgres"):
    return f"host={HOST} port={PORT} user={user} dbname={db}"


def wait(what, check, timeout=90):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = check()
            if last is True:
                return
        except Exception as error:  # a component still starting
            last = error
        time.sleep(0.5)
    sys.exit(f"observability: timed out waiting for {what} (last: {last})")


def stripe_headers(body, secret):
    import hashlib
    import hmac

    ts = int(time.time())
    sig = hmac.new(secret.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return json.dumps({"Stripe-Signature": f"t={ts},v1={sig}"})


def drive(db):
    """The known mix; returns what Prometheus must show."""
    db.execute("SELECT webhook_register_provider('shop', scheme => 'stripe', secret => 'whsec_shop')")
    db.execute("SELECT webhook_register_provider('gh', scheme => 'stripe', secret => 'whsec_gh',"
               " inbox => true, consumers => ARRAY['billing', 'audit'])")

    def claim(event_id):
        return db.execute("SELECT id, claimed, status FROM webhook_claim('pay', %s, 'charge', %s::jsonb, NULL)",
                          (event_id, json.dumps({"id": event_id}))).fetchone()

    for i in range(5):  # new, processed
        cid, _, _ = claim(f"p{i}")
        db.execute("SELECT webhook_complete(%s)", (cid,))
    for i in range(3):  # duplicates
        assert claim(f"p{i}")[2] == "duplicate"
    cid, _, _ = claim("flaky")  # failed, then retried and processed
    db.execute("SELECT webhook_fail(%s, 'timeout')", (cid,))
    cid, _, status = claim("flaky")
    assert status == "retry", status
    db.execute("SELECT webhook_complete(%s)", (cid,))
    claim("slow")  # claimed, its work still running
    cid, _, _ = claim("poison")  # dead
    db.execute("SELECT webhook_fail(%s, 'bad data', permanent => true)", (cid,))

    for i in range(4):  # forged
        body = json.dumps({"id": f"forged{i}", "type": "charge"}).encode()
        row = db.execute("SELECT http_status FROM webhook_receive('shop', %s::jsonb, %s::bytea)",
                         (stripe_headers(body, "whsec_guess"), body)).fetchone()
        assert row[0] == 401, row
    for i in range(2):  # genuine, claimed and processed
        body = json.dumps({"id": f"real{i}", "type": "charge"}).encode()
        row = db.execute("SELECT id, status FROM webhook_receive('shop', %s::jsonb, %s::bytea)",
                         (stripe_headers(body, "whsec_shop"), body)).fetchone()
        assert row[1] == "claimed", row
        db.execute("SELECT webhook_complete(%s)", (row[0],))

    for i in range(3):  # queued for two consumers
        body = json.dumps({"id": f"q{i}", "type": "push"}).encode()
        row = db.execute("SELECT status FROM webhook_receive('gh', %s::jsonb, %s::bytea)",
                         (stripe_headers(body, "whsec_gh"), body)).fetchone()
        assert row[0] == "queued", row
    for row in db.execute("SELECT id FROM webhook_next(10, 'billing', 'gh')").fetchall():
        db.execute("SELECT webhook_complete(%s)", (row[0],))
    leases = [r[0] for r in db.execute("SELECT id FROM webhook_next(2, 'audit', 'gh')").fetchall()]
    db.execute("SELECT webhook_complete(%s)", (leases[0],))
    db.execute("SELECT webhook_fail(%s, 'rejected by audit', permanent => true)", (leases[1],))

    return {
        'webhook_deliveries_total{provider="pay",status="claimed"}': 8,
        'webhook_deliveries_total{provider="pay",status="duplicate"}': 3,
        'webhook_deliveries_total{provider="pay",status="retry"}': 1,
        'webhook_deliveries_total{provider="shop",status="rejected"}': 4,
        'webhook_deliveries_total{provider="shop",status="claimed"}': 2,
        'webhook_deliveries_total{provider="gh",status="queued"}': 3,
        'webhook_rejections_total{provider="shop",reason="bad_signature"}': 4,
        'webhook_completions_total{provider="pay",consumer=""}': 6,
        'webhook_completions_total{provider="shop",consumer=""}': 2,
        'webhook_completions_total{provider="gh",consumer="billing"}': 3,
        'webhook_completions_total{provider="gh",consumer="audit"}': 1,
        'webhook_failures_total{provider="pay",consumer=""}': 2,
        'webhook_failures_total{provider="gh",consumer="audit"}': 1,
        'webhook_dead_letters_total{provider="pay",consumer=""}': 1,
        'webhook_dead_letters_total{provider="gh",consumer="audit"}': 1,
        'webhook_latency_seconds_count{provider="gh",consumer="billing"}': 3,
        'webhook_latency_seconds_bucket{provider="gh",consumer="billing",le="+Inf"}': 3,
        'webhook_attempts_bucket{provider="pay",consumer="",le="1"}': 5,
        'webhook_attempts_bucket{provider="pay",consumer="",le="2"}': 6,
        'webhook_attempts_sum{provider="pay",consumer=""}': 7,
        'webhook_inbox_events{provider="gh",consumer="audit",state="ready"}': 1,
        'webhook_inbox_events{provider="gh",consumer="audit",state="dead"}': 1,
        'webhook_inbox_events{provider="gh",consumer="audit",state="leased"}': 0,
        'count(webhook_oldest_unfinished_claim_seconds{provider="pay"} > 0)': 1,
        # The histogram works as one: a quantile Prometheus computes.
        'histogram_quantile(1, webhook_attempts_bucket{provider="pay",consumer=""})': 2,
    }


def prometheus(query):
    url = f"http://127.0.0.1:{PROMETHEUS_PORT}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as answer:
        data = json.load(answer)
    result = data["data"]["result"]
    if len(result) != 1:
        return None if not result else ("several series", result)
    return float(result[0]["value"][1])


def ingress_metrics(db, children):
    """webhook-ingress's HTTP metrics as Prometheus scrapes them: two
    genuine deliveries and a forged one through it, counted by provider and
    status, the latency histogram usable by histogram_quantile."""
    import hashlib
    import hmac

    db.execute("CREATE ROLE webhook_ingress LOGIN")
    db.execute("SELECT webhook_grant_app('webhook_ingress')")
    db.execute("SELECT webhook_register_provider('ingress-gh', scheme => 'github', secret => 'ingress-secret', inbox => true)")
    children.append(subprocess.Popen(
        [os.environ["INGRESS_BIN"], "--listen", f"127.0.0.1:{INGRESS_PORT}", "--database", dsn("webhook_ingress")]))
    base = f"http://127.0.0.1:{INGRESS_PORT}"
    wait("the ingress to be ready", lambda: urllib.request.urlopen(f"{base}/readyz", timeout=2).status == 200)

    def deliver(delivery, secret):
        body = json.dumps({"id": delivery, "action": "opened"}).encode()
        sig = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        request = urllib.request.Request(f"{base}/ingress-gh", data=body, method="POST", headers={
            "X-GitHub-Delivery": delivery, "X-GitHub-Event": "issues", "X-Hub-Signature-256": f"sha256={sig}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code

    statuses = [deliver("ing-1", "ingress-secret"), deliver("ing-2", "ingress-secret"), deliver("ing-3", "forged")]
    assert statuses == [200, 200, 401], statuses
    for query, value in {
        'up{job="webhook_ingress"}': 1,
        'webhook_ingress_requests_total{provider="ingress-gh",code="200"}': 2,
        'webhook_ingress_requests_total{provider="ingress-gh",code="401"}': 1,
        'webhook_ingress_request_duration_seconds_count{provider="ingress-gh"}': 3,
        'webhook_ingress_pool_max': 8,
    }.items():
        wait(f"{query} = {value}", lambda: prometheus(query) == value or prometheus(query))
    quantile = prometheus('histogram_quantile(0.99, sum by (le) (webhook_ingress_request_duration_seconds_bucket))')
    assert quantile is not None and 0 < quantile <= 10, quantile
    # The registry's age, as the shipped stale-registry alert reads it: read
    # at start and every 30 s since, so never near the alert's 300 s.
    age = prometheus("time() - webhook_ingress_registry_read_timestamp_seconds")
    assert age is not None and 0 <= age < 90, age
    with urllib.request.urlopen(f"http://127.0.0.1:{PROMETHEUS_PORT}/api/v1/rules?type=alert", timeout=5) as answer:
        loaded = {rule["name"]: rule for group in json.load(answer)["data"]["groups"] for rule in group["rules"]}
    stale = loaded.get("WebhookIngressRegistryStale")
    assert stale is not None and stale["health"] in ("ok", "unknown") and stale["state"] == "inactive", stale
    print(f"observability: webhook-ingress scraped with the shipped configuration: requests by provider and status, "
          f"p99 {quantile * 1000:.1f} ms, the registry read {age:.0f} s ago")


class Chat(http.server.BaseHTTPRequestHandler):
    """The stand-in for a chat service's incoming-webhook URL."""

    posts = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Chat.posts.append(json.loads(body)["text"])
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def main():
    work = tempfile.mkdtemp(prefix="webhook-observability-")
    children = []
    try:
        with psycopg.connect(dsn("postgres"), autocommit=True) as db:
            db.execute("CREATE EXTENSION pg_webhook_inbox")
            db.execute("CREATE ROLE webhook_monitor LOGIN")
            db.execute("SELECT webhook_grant_monitor('webhook_monitor')")
            db.execute("CREATE ROLE webhook_ops LOGIN")
            db.execute("SELECT webhook_grant_operator('webhook_ops')")
            expected = drive(db)

            env = dict(os.environ, DATA_SOURCE_NAME=f"postgresql://webhook_monitor@{HOST}:{PORT}/postgres?sslmode=disable")
            children.append(subprocess.Popen(
                # Only the shipped queries: 0.11's bgwriter collector reads
                # columns PostgreSQL 17 renamed, and logs an error per scrape.
                ["prometheus-postgres-exporter", "--disable-default-metrics", "--disable-settings-metrics",
                 "--no-collector.bgwriter", "--no-collector.database",
                 f"--extend.query-path={MONITORING}/postgres_exporter.yaml",
                 f"--web.listen-address=127.0.0.1:{EXPORTER_PORT}", "--log.level=warn"],
                env=env))
            config = os.path.join(work, "prometheus.yml")
            with open(os.path.join(MONITORING, "prometheus.yml")) as shipped:
                text = shipped.read()
            text = text.replace("scrape_interval: 30s", "scrape_interval: 1s")
            text = text.replace("127.0.0.1:9187", f"127.0.0.1:{EXPORTER_PORT}")
            text = text.replace("127.0.0.1:8490", f"127.0.0.1:{INGRESS_PORT}")
            text = text.replace("prometheus-rules.yml", os.path.join(MONITORING, "prometheus-rules.yml"))
            with open(config, "w") as out:
                out.write(text)
            subprocess.run(["promtool", "check", "config", config], check=True, stdout=subprocess.DEVNULL)
            children.append(subprocess.Popen(
                ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work}/tsdb",
                 f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}", "--log.level=warn"]))

            for query, value in expected.items():
                wait(f"{query} = {value}", lambda: prometheus(query) == value or prometheus(query))
            print(f"observability: {len(expected)} series read through the exporter and Prometheus equal the known mix")

            ingress_metrics(db, children)

            # The dashboard reads only what webhook_metrics() exports.
            exported = {r[0] for r in db.execute("SELECT DISTINCT metric FROM webhook_metrics()")}
            families = {r[0] for r in db.execute("SELECT family FROM webhook._metric_families()")}
            exported |= {f + s for f in families for s in ("", "_bucket", "_sum", "_count", "_total")}
            with open(os.path.join(MONITORING, "grafana-dashboard.json")) as f:
                dashboard = json.load(f)
            used = set()
            for panel in dashboard["panels"]:
                for target in panel["targets"]:
                    used |= set(re.findall(r"\bwebhook_[a-z_]+", target["expr"]))
            unknown = sorted(used - exported)
            if unknown:
                sys.exit(f"observability: the dashboard reads metrics nobody exports: {unknown}")
            names = json.load(urllib.request.urlopen(
                f"http://127.0.0.1:{PROMETHEUS_PORT}/api/v1/label/__name__/values"))["data"]
            missing = sorted(m for m in used if m not in names)
            if missing:
                sys.exit(f"observability: the dashboard reads metrics Prometheus never received: {missing}")
            print(f"observability: the dashboard's {len(used)} metrics are all exported and scraped")

            # sql_exporter is not packaged here: its collector is checked
            # to read only series webhook_metrics() has.
            with open(os.path.join(MONITORING, "sql_exporter.yml")) as f:
                collector = f.read()
            read = set(re.findall(r"metric = '(webhook_[a-z_]+)'", collector))
            if not read or read - exported:
                sys.exit(f"observability: sql_exporter.yml reads series nobody exports: {sorted(read - exported)}")

            if not WITH_CRON:
                print("observability: pg_cron is packaged for PostgreSQL 15 only; alerts checked by the client suites")
                return

            server = http.server.ThreadingHTTPServer(("127.0.0.1", CHAT_PORT), Chat)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            children.append(subprocess.Popen(
                [sys.executable, os.path.join(MONITORING, "alert_relay.py")],
                env=dict(os.environ, DATABASE_URL=dsn("webhook_ops"),
                         ALERT_WEBHOOK_URL=f"http://127.0.0.1:{CHAT_PORT}/hook")))
            db.execute("CREATE EXTENSION pg_cron")
            db.execute("SELECT cron.schedule('webhook-alerts', '* * * * *',"
                       " 'SELECT count(*) FROM webhook_alerts_evaluate()')")
            wait("pg_cron to evaluate the alerts and the relay to post them",
                 # Each dead letter's alert, once or (were it raised between the
                 # relay's LISTEN and its look at the open ones) twice.
                 lambda: all(any(f"[opened] dead_letters on {subject}:" in p for p in Chat.posts)
                             for subject in ("gh / audit", "pay")) or Chat.posts, timeout=150)
            runs = db.execute("SELECT status FROM cron.job_run_details ORDER BY start_time").fetchall()
            assert runs and all(r[0] == "succeeded" for r in runs), runs
            alert_id = db.execute("SELECT id FROM webhook.alerts WHERE rule = 'dead_letters' AND provider = 'gh'").fetchone()[0]
            with psycopg.connect(dsn("webhook_ops"), autocommit=True) as ops:
                ops.execute("SELECT webhook_alert_acknowledge(%s)", (alert_id,))
            wait("the relay to post the acknowledgement",
                 lambda: any("[acknowledged] dead_letters on gh / audit" in p for p in Chat.posts) or Chat.posts)
            print(f"observability: pg_cron evaluated the alerts ({len(runs)} run(s)); the relay posted: {Chat.posts}")
            db.execute("SELECT cron.unschedule('webhook-alerts')")
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait()


if __name__ == "__main__":
    main()
