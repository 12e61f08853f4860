"""Relay pg_webhook_inbox alerts to a chat channel.

Listens on the webhook_alert channel (webhook_alerts_evaluate() notifies
it when an alert opens, is acknowledged or resolves) and posts each change
to an incoming-webhook URL, as Slack, Mattermost, Rocket.Chat and Teams'
Slack-compatible connectors take it: a JSON body with "text".

    DATABASE_URL=postgresql://ops@db/app \
    ALERT_WEBHOOK_URL=https://hooks.slack.com/services/... \
    python alert_relay.py

NOTIFY is delivered only to sessions listening when the evaluation
commits: the relay reconnects at once when its connection drops, and on
every (re)connection posts the alerts still open, so that nothing raised
while it was away goes unsaid. It needs an operator role
(webhook_grant_operator) to read webhook.alerts.
"""

import json
import os
import sys
import time
import urllib.request

import psycopg

ICONS = {"opened": ":rotating_light:", "acknowledged": ":eyes:", "resolved": ":white_check_mark:"}


def post(url, alert, change):
    subject = alert["provider"] + (f" / {alert['consumer']}" if alert.get("consumer") else "")
    text = f"{ICONS.get(change, '')} [{change}] {alert['rule']} on {subject}: {alert['message']}"
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    # A chat service that is down must not stop the relay: retry a few
    # times, then say so and go on.
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                if 200 <= answer.status < 300:
                    return
        except OSError as error:
            print(f"alert_relay: posting failed ({error})", file=sys.stderr, flush=True)
        time.sleep(2**attempt)


def still_open(conn):
    rows = conn.execute(
        "SELECT json_build_object('id', id, 'rule', rule, 'provider', provider, 'consumer', consumer,"
        " 'status', status, 'message', message)::text FROM webhook.alerts WHERE status = 'open' ORDER BY id"
    ).fetchall()
    return [json.loads(r[0]) for r in rows]


def relay(dsn, url):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("LISTEN webhook_alert")
        for alert in still_open(conn):
            post(url, alert, "opened")
        print("alert_relay: listening on webhook_alert", flush=True)
        for note in conn.notifies():
            alert = json.loads(note.payload)
            post(url, alert, alert["change"])


def main():
    dsn = os.environ.get("DATABASE_URL", "")
    url = os.environ["ALERT_WEBHOOK_URL"]
    while True:
        try:
            relay(dsn, url)
        except psycopg.OperationalError as error:
            print(f"alert_relay: connection lost ({error}); reconnecting", file=sys.stderr, flush=True)
            time.sleep(1)


if __name__ == "__main__":
    main()
