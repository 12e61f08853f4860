#!/usr/bin/env bash
# The demo: one signed webhook event delivered 10 times — the first attempt
# fails halfway, two arrive at once, the rest are provider retries — then a
# forged copy; exactly one side effect.
#
# Connects with the usual libpq variables (PGHOST, PGPORT, PGUSER,
# PGDATABASE) or DATABASE_URL; `make demo` starts a throwaway server if
# none is given.
set -euo pipefail
cd "$(dirname "$0")"

conn=()
if [ -n "${DATABASE_URL:-}" ]; then conn=(-d "$DATABASE_URL"); fi
sql() { psql -X -q -v ON_ERROR_STOP=1 "${conn[@]}" "$@"; }

secret='demo-signing-secret'
event_id="evt_demo_$(date +%s)"
body="{\"id\":\"$event_id\",\"type\":\"invoice.paid\",\"data\":{\"customer\":\"cus_42\",\"credits\":100}}"
sign() { printf 'sha256=%s' "$(printf '%s' "$1" | openssl dgst -sha256 -hmac "$secret" -r | cut -d' ' -f1)"; }
headers() {  # the request headers, as the web framework hands them over
    printf '{"X-GitHub-Delivery": "%s", "X-GitHub-Event": "invoice.paid", "X-Hub-Signature-256": "%s"}' \
        "$event_id" "$1"
}
signed_headers=$(headers "$(sign "$body")")
started=$(sql -At -c "SELECT clock_timestamp()")

echo "Registering the provider and the handler (examples/demo_handler.sql)"
sql -v secret="$secret" -f demo_handler.sql
echo

deliver() {  # deliver LABEL BODY [inject_failure] [work_seconds]
    local label=$1 payload=$2 fail=${3:-false} work=${4:-0} code
    code=$(sql -At -v headers="$signed_headers" -v body="$payload" -v fail="$fail" -v work="$work" \
               <<< "SELECT demo.handle_delivery(:'headers', :'body', :'fail', :'work')")
    printf '  %-46s -> HTTP %s\n' "$label" "$code"
}

echo "Delivering $event_id, signed $(sign "$body")"
deliver "delivery 1: handler fails halfway" "$body" true
deliver "delivery 2: slow handler (1 s)" "$body" false 1 &
sleep 0.3
deliver "delivery 3: same moment, another server" "$body"
wait
for n in 4 5 6 7 8 9 10; do
    deliver "delivery $n: provider retry" "$body"
done
deliver "forged copy: credits changed, same signature" "${body/100/100000}"

echo
echo "The archive: every delivery, what the claim answered, and why"
sql -v event_id="$event_id" -v started="$started" <<< "
SELECT claim_status, processing_status, error_message, created_at::time(3) AS received
  FROM webhook.deliveries
 WHERE provider = 'demo-shop'
   AND (event_id = :'event_id' OR (processing_status = 'REJECTED' AND created_at >= :'started'))
 ORDER BY created_at, claim_status DESC"
echo "The event: the dedup row, kept forever"
sql -v event_id="$event_id" <<< "
SELECT provider, event_id, status, attempts, last_error, result
  FROM webhook.events WHERE provider = 'demo-shop' AND event_id = :'event_id'"
echo "The side effect: credits granted once"
sql -v event_id="$event_id" <<< "
SELECT event_id, customer, credits FROM demo.credit_grants WHERE event_id = :'event_id'"
echo "The metrics: what an exporter scrapes (webhook_metrics_prometheus() has them as text)"
sql -v started="$started" <<< "
SELECT metric, label_value AS status_or_reason, value
  FROM webhook_metrics()
 WHERE provider = 'demo-shop'
   AND metric IN ('webhook_deliveries_total', 'webhook_rejections_total', 'webhook_completions_total',
                  'webhook_failures_total', 'webhook_processing_seconds_count')
 ORDER BY metric, label_value"
