#!/usr/bin/env bash
# The HTTP front door on the demo database: registers an inbox provider,
# starts webhook-ingress, sends it a signed delivery twice with curl (stored
# and queued, then answered as a duplicate) and a forged one (refused), shows
# the queued event a worker would take, and keeps serving until Ctrl-C.
#
# Connects with the usual libpq variables (PGHOST, PGPORT, PGUSER,
# PGDATABASE) or DATABASE_URL; `make ingress` starts a throwaway server if
# none is given. INGRESS_BIN names the binary; INGRESS_LISTEN its address.
set -euo pipefail
cd "$(dirname "$0")"

conn=()
if [ -n "${DATABASE_URL:-}" ]; then conn=(-d "$DATABASE_URL"); fi
sql() { psql -X -q -v ON_ERROR_STOP=1 "${conn[@]}" "$@"; }
listen=${INGRESS_LISTEN:-127.0.0.1:8490}
secret='demo-inbox-secret'

sql -c "CREATE EXTENSION IF NOT EXISTS pg_webhook_inbox" 2>/dev/null
echo "Registering demo-inbox (GitHub's scheme, inbox mode)"
sql -v secret="$secret" -o /dev/null <<< "
SELECT * FROM webhook_register_provider('demo-inbox', scheme => 'github', secret => :'secret', inbox => true)"

# The connection string the ingress uses: the same server and role.
database=${DATABASE_URL:-}
if [ -z "$database" ]; then
    database="host=${PGHOST:-/var/run/postgresql} port=${PGPORT:-5432} user=${PGUSER:-$(id -un)} dbname=${PGDATABASE:-${PGUSER:-$(id -un)}}"
fi
"${INGRESS_BIN:?INGRESS_BIN names the webhook-ingress binary}" --listen "$listen" --database "$database" \
    --prefix /webhooks &
ingress=$!
trap 'kill $ingress 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -fsS "http://$listen/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "http://$listen/readyz"; echo

event_id="evt_ingress_$(date +%s)"
body="{\"id\":\"$event_id\",\"action\":\"opened\"}"
signature="sha256=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$secret" -r | cut -d' ' -f1)"
post() {  # post LABEL SIGNATURE
    printf '  %-28s -> ' "$1"
    curl -sS -X POST "http://$listen/webhooks/demo-inbox" \
        -H "X-GitHub-Delivery: $event_id" -H "X-GitHub-Event: issues" \
        -H "X-Hub-Signature-256: $2" -H 'Content-Type: application/json' \
        --data-binary "$body" -w ' (HTTP %{http_code})\n'
}
echo
echo "Delivering $event_id to http://$listen/webhooks/demo-inbox"
post "the delivery" "$signature"
post "the provider's retry" "$signature"
post "a forged copy" "sha256=$(printf '0%.0s' $(seq 64))"
echo
echo "Queued for a worker (webhook_next takes it):"
sql -v event_id="$event_id" <<< "
SELECT provider, event_id, event_type, status FROM webhook.inbox WHERE event_id = :'event_id'"
echo "Serving POST http://$listen/webhooks/<provider> (metrics at /metrics); Ctrl-C stops it."
wait $ingress
