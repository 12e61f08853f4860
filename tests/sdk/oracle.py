"""The providers' own Python verifiers as the judge (see oracle.mjs, which
writes the same lines for the verifiers published on npm): Slack's, whose
signature check Bolt uses, and Stripe's Python library, which reads a
Stripe-Signature header otherwise than its Node library does."""
import hashlib
import hmac
import json
import os
import time
from urllib.parse import quote_plus, urlencode

import stripe
from slack_sdk.signature import SignatureVerifier

LINES = []


def judge(scheme, name, verdict_of, cases):
    for change, delivery in cases.items():
        try:
            verdict = verdict_of(delivery) is True
        except Exception:  # the library refuses by raising
            verdict = False
        LINES.append({"case": f"{scheme}/{change}", "scheme": scheme, "judge": name, "verdict": verdict,
                      "headers": delivery["headers"], "body": delivery["body"], "secret": delivery["secret"],
                      "url": None, "at": int(time.time())})


def hexmac(key, text):
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


# Slack: events (JSON), slash commands (a form), interactivity (a form with
# the interaction as JSON in `payload`), all signed alike.
secret = os.urandom(16).hex()
now = int(time.time())
event = '{"token":"z26uFbvR1xHJEdHE1OQiO6t8","team_id":"T0001","api_app_id":"A123456","event":{"type":"app_mention","text":"hi","user":"U1","ts":"1700000000.000100","channel":"C1"},"type":"event_callback","event_id":"Ev08MFMKH6","event_time":1700000000}'
command = urlencode({"token": "gIkuvaNzQIHg97ATvDxqgjtO", "team_id": "T0001", "channel_id": "C2147483705",
                     "user_id": "U2147483697", "command": "/weather", "text": "94070 Zoë",
                     "response_url": "https://hooks.slack.com/commands/1234/5678",
                     "trigger_id": "13345224609.738474920.8088930838d88f008e0", "api_app_id": "A123456"})
interaction = "payload=" + quote_plus(json.dumps({
    "type": "block_actions", "trigger_id": "12466734323.1395872398", "user": {"id": "U1"},
    "actions": [{"action_id": "approve", "value": "yes", "action_ts": "1700000000.000100"}]}))


def slack(body, ts=now, signature=None, key=secret):
    return {"headers": {"X-Slack-Request-Timestamp": str(ts),
                        "X-Slack-Signature": signature or "v0=" + hexmac(secret, f"v0:{ts}:{body}")},
            "body": body, "secret": key}


def slack_verdict(d):
    return SignatureVerifier(d["secret"]).is_valid(
        body=d["body"], timestamp=d["headers"]["X-Slack-Request-Timestamp"],
        signature=d["headers"]["X-Slack-Signature"])


judge("slack", "slack_sdk (Python) 3.48.0", slack_verdict, {
    "genuine": slack(event),
    "a slash command": slack(command),
    "an interaction": slack(interaction),
    "body changed": slack(event, signature="v0=" + hexmac(secret, f"v0:{now}:{event}"))
    | {"body": event.replace("hi", "ho")},
    "another secret": slack(event, key=os.urandom(16).hex()),
    "upper-case hex": slack(event, signature="v0=" + hexmac(secret, f"v0:{now}:{event}").upper()),
    "the timestamp changed": slack(event, ts=now + 1, signature="v0=" + hexmac(secret, f"v0:{now}:{event}")),
    "signed ten minutes ago": slack(event, ts=now - 600),
    "signed a minute ago": slack(event, ts=now - 60),
    "signed ten minutes ahead": slack(event, ts=now + 600),
})

# Stripe's Python library on the headers its Node library reads otherwise.
key = "whsec_" + os.urandom(24).hex()
body = '{"id":"evt_1","object":"event","type":"invoice.paid","created":1700000000,"data":{"object":{"id":"in_1"}}}'


def stripe_case(header):
    return {"headers": {"Stripe-Signature": header}, "body": body, "secret": key}


def stripe_verdict(d):
    stripe.WebhookSignature.verify_header(d["body"], d["headers"]["Stripe-Signature"], d["secret"], tolerance=300)
    return True


sig = lambda t: hexmac(key, f"{t}.{body}")  # noqa: E731
judge("stripe", f"stripe (Python) {stripe.VERSION}", stripe_verdict, {
    "genuine": stripe_case(f"t={now},v1={sig(now)}"),
    "two t, the first signed": stripe_case(f"t={now},t={now + 7},v1={sig(now)}"),
    "two t, the last signed": stripe_case(f"t={now - 7},t={now},v1={sig(now)}"),
    "a space after each comma": stripe_case(f"t={now}, v1={sig(now)}"),
    "upper-case hex": stripe_case(f"t={now},v1={sig(now).upper()}"),
    "signed an hour ahead": stripe_case(f"t={now + 3600},v1={sig(now + 3600)}"),
})

for line in LINES:
    print(json.dumps(line, ensure_ascii=False))
