"""Sign deliveries with the providers' official Python SDKs and print them as
JSON lines for tests/provider_sdks.rs. Each SDK first checks its own output."""
import base64
import json
import os
import time
from datetime import datetime, timezone

from slack_sdk.signature import SignatureVerifier
from standardwebhooks.webhooks import Webhook

BODIES = [
    '{"type":"user.created","data":{"id":"user_29w83sxmDNGwOuEthce5gg56FcC"}}',
    '{\n  "type": "message.sent",   "text": "Zoë ✓ 東京"\n}',
]


def emit(**fixture):
    print(json.dumps(fixture, ensure_ascii=False))


for body in BODIES:
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    hook = Webhook(secret)
    msg_id = "msg_" + base64.b32encode(os.urandom(10)).decode().lower()
    now = datetime.now(tz=timezone.utc)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": hook.sign(msg_id, now, body),
    }
    hook.verify(body, headers)  # raises unless valid
    emit(sdk="standardwebhooks (Python) 1.1.0", scheme="standard", headers=headers, body=body,
         secret=secret, timestamped=True)

for body in BODIES:
    secret = os.urandom(16).hex()
    verifier = SignatureVerifier(secret)
    ts = str(int(time.time()))
    signature = verifier.generate_signature(timestamp=ts, body=body)
    assert verifier.is_valid(body=body, timestamp=ts, signature=signature)
    emit(sdk="slack_sdk (Python) 3.48.0", scheme="slack",
         headers={"X-Slack-Signature": signature, "X-Slack-Request-Timestamp": ts},
         body=body, secret=secret, timestamped=True)
