-- pg_webhook_inbox: run after every function exists: the comments on the
-- functions written in Rust, the privilege rule (roles.sql), and the
-- tables pg_dump must keep.

-- Bound to pg_catalog while this file runs (see schema.sql).
SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);

-- What \df+ shows for the functions written in Rust (pgrx creates them; the
-- ones written in SQL carry their comments beside their definitions).
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text) IS
    'Verify a delivery with its provider''s registered scheme and secrets (and the URL it was sent to, for schemes that sign it), read its event id and type, claim it or queue it (inbox), and say what to answer (http_status; response for an endpoint handshake); complete_on_commit: the commit of this transaction completes a claimed event; traceparent: the W3C trace context of the request, handed to a queued event''s worker';
COMMENT ON FUNCTION @extschema@.webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text) IS
    'webhook_receive for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, jsonb, text, interval, boolean) IS
    'Claim a delivery (payload as jsonb): claimed/retry (do the work, then webhook_complete, or with complete_on_commit just commit), duplicate, in_progress, dead or stale';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, bytea, text, interval, boolean) IS
    'webhook_claim with the raw body, archived byte for byte';
COMMENT ON FUNCTION @extschema@.webhook_claim(text, text, text, text, text, interval, boolean) IS
    'webhook_claim with the raw body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_complete(uuid, jsonb) IS
    'Mark a claimed delivery''s event (or a lease''s inbox row) processed, in the transaction of its work; result is returned to later duplicates; an ordered event moves its entity''s watermark';
COMMENT ON FUNCTION @extschema@.webhook_fail(uuid, text, interval, boolean) IS
    'Record a failed attempt: a claimed event''s next delivery is a retry, a leased one is ready again after retry_in or the backoff; dead after webhook.max_attempts, or at once if permanent';
COMMENT ON FUNCTION @extschema@.webhook_complete_batch(uuid[]) IS
    'Mark a batch of inbox leases (from webhook_next) processed in one call, each fenced as by webhook_complete; one lease that may not finish refuses the whole call';
COMMENT ON FUNCTION @extschema@.webhook_fail_batch(uuid[], text, interval, boolean) IS
    'Record a failed attempt for a batch of inbox leases in one call, each ready again after retry_in or its own backoff (dead after webhook.max_attempts, or at once if permanent); one lease that may not fail refuses the whole call';
COMMENT ON FUNCTION @extschema@.webhook_extend(uuid, interval) IS
    'Renew a live claim''s lease, from now (at most webhook.max_lease); returns the new expiry. A claim that completes on commit has no lease';
COMMENT ON FUNCTION @extschema@.webhook_requeue(text, text, text) IS
    'For operators: put a dead or failed event (a queued event''s dead consumers) back with a fresh attempt budget, recorded in webhook.requeues';
COMMENT ON FUNCTION @extschema@.webhook_requeue_dead(text, text, text, timestamptz, timestamptz, text) IS
    'For operators: requeue every dead letter matching provider, event type, error (ILIKE), arrival time and consumer; returns how many';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, jsonb, text, text) IS
    'Queue a delivery the caller verified (payload as jsonb) for inbox workers: queued (new) or duplicate; answer 2xx either way; traceparent: the W3C trace context of the request, handed to the event''s worker';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, bytea, text, text) IS
    'webhook_enqueue with the raw body, archived byte for byte';
COMMENT ON FUNCTION @extschema@.webhook_enqueue(text, text, text, text, text, text) IS
    'webhook_enqueue with the raw body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_next(integer, text, text, text, interval) IS
    'Lease up to batch ready inbox events of a consumer, never waiting on another worker (stale ordered events are parked, FIFO entities wait their turn); finish each with webhook_complete or webhook_fail. replay_id names the replay that queued an event again; traceparent is the trace context its request came with; origin says where it came from (verified, polled, enqueued)';
COMMENT ON FUNCTION @extschema@.verify_hmac(text, bytea, text, text) IS
    'Constant-time check of an HMAC signature (hex or base64) over the raw body';
COMMENT ON FUNCTION @extschema@.verify_hmac(text, text, text, text) IS
    'verify_hmac for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_verify(text, jsonb, bytea, text[], interval, text) IS
    'Whether a delivery is signed under a provider scheme by one of the secrets (shared secrets, public keys or certificates), within the timestamp tolerance; url for schemes that sign it';
COMMENT ON FUNCTION @extschema@.webhook_verify(text, jsonb, text, text[], interval, text) IS
    'webhook_verify for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_verify_detail(text, jsonb, bytea, text[], interval, text) IS
    'webhook_verify, saying why: (valid, reason, signed_at)';
COMMENT ON FUNCTION @extschema@.webhook_verify_detail(text, jsonb, text, text[], interval, text) IS
    'webhook_verify_detail for a body passed as text';
COMMENT ON FUNCTION @extschema@.webhook_source_signed(text, text) IS
    'Whether a scheme''s signature covers a registry source (header:<name> or body:<path>, alternatives separated by |): every alternative must be covered';
COMMENT ON FUNCTION @extschema@.webhook_route_key(text, text, text, jsonb, bytea, text) IS
    'A delivery''s route key in a tier of databases, from signed material only and without a secret: entity:<key> for an ordered provider, else event:<id> where the scheme signs the id, else signed:<SHA-256 of the signed bytes> (body:<SHA-256 of the body> when nothing signed can be read)';
COMMENT ON FUNCTION @extschema@.webhook_check_key(text, text) IS
    'Why a key (secret, public key or certificate) cannot verify deliveries under a scheme, or NULL when it can';
COMMENT ON FUNCTION @extschema@.webhook_schemes() IS
    'The signature schemes, their aliases, the registry defaults each gives a provider (ordering''s presets included), and what each signature covers of the body and headers';
COMMENT ON FUNCTION @extschema@.webhook_outbound_key(uuid, text) IS
    'A stable idempotency key for an external call (operation) made while processing the event of a claim, delivery or lease id: the same on every attempt';
COMMENT ON FUNCTION @extschema@.webhook_outbound_key(text, text, text) IS
    'webhook_outbound_key for an event named by provider and event id';
COMMENT ON FUNCTION @extschema@.idempotency_begin(text, text, text, interval) IS
    'Begin a request carrying an idempotency key: new (owned under a lease; resume from recovery_point), in_progress (409), replay (the stored response) or mismatch (422)';
COMMENT ON FUNCTION @extschema@.idempotency_checkpoint(uuid, text, jsonb) IS
    'Record that a keyed request passed a step, with its output, in the step''s own transaction; renews the lease';
COMMENT ON FUNCTION @extschema@.idempotency_finish(uuid, integer, text, jsonb) IS
    'Finish a keyed request with the response every later request with the key gets back';
COMMENT ON FUNCTION @extschema@.idempotency_fail(uuid, text, boolean, integer, text, jsonb) IS
    'Record a keyed request''s failure: retryable frees the key (the next request resumes); final stores the response later requests get back';
COMMENT ON FUNCTION @extschema@.idempotency_fingerprint(text, text, bytea) IS
    'A request fingerprint for idempotency_begin: SHA-256 of the method, path and body';
COMMENT ON FUNCTION @extschema@.idempotency_fingerprint(text, text, text) IS
    'idempotency_fingerprint for a body passed as text';
COMMENT ON FUNCTION webhook._lock_quarantines(text) IS
    'Internal: wait until no call of webhook_next may still set aside a provider''s quarantined events, and keep new ones from it until the transaction ends';
COMMENT ON FUNCTION @extschema@.idempotency_purge(interval) IS
    'Remove idempotency keys first used longer ago than older_than (default webhook.idempotency_retention), never one still in progress; returns how many';

-- A lease is a few index probes, but its generic plan is costed for whole
-- queues: past jit_above_cost, every call would compile it with LLVM
-- (most of a second) before leasing anything.
ALTER FUNCTION @extschema@.webhook_next(integer, text, text, text, interval) SET jit = off;

-- webhook_receive caches the registry in each backend (src/registry.rs);
-- a change to it, committed, drops every backend's copy. A secret's use
-- (webhook.secret_uses) changes nothing webhook_receive reads.
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.providers
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OF provider, secret, fingerprint, added_at, retired_at OR DELETE OR TRUNCATE
    ON webhook.provider_secrets
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
-- Application roles' scopes are cached the same way.
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.app_scopes
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
-- And what steers the inbox (flow.sql): a pause holds from the next
-- webhook_next of every backend.
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.pauses
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.limits
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
-- And the filters (filters.sql): webhook_receive judges a provider's
-- deliveries from the next call of every backend.
CREATE TRIGGER registry_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook.filters
    FOR EACH STATEMENT EXECUTE FUNCTION @extschema@.webhook_registry_changed();
-- Always: a change made under session_replication_role = replica (a
-- restore, a logical replication apply) must reach the caches as well.
ALTER TABLE webhook.providers ENABLE ALWAYS TRIGGER registry_changed;
ALTER TABLE webhook.provider_secrets ENABLE ALWAYS TRIGGER registry_changed;
ALTER TABLE webhook.app_scopes ENABLE ALWAYS TRIGGER registry_changed;
ALTER TABLE webhook.pauses ENABLE ALWAYS TRIGGER registry_changed;
ALTER TABLE webhook.limits ENABLE ALWAYS TRIGGER registry_changed;
ALTER TABLE webhook.filters ENABLE ALWAYS TRIGGER registry_changed;
COMMENT ON FUNCTION @extschema@.webhook_registry_changed() IS
    'Trigger on the provider registry, the application roles'' scopes, the pauses, the limits and the filters: drops every backend''s cached copy of them once the change commits';

-- The privilege rule (roles.sql).
SELECT webhook._restrict_privileges();
-- Tables and views grant PUBLIC nothing anyway; saying so records their
-- ACLs as the extension's initial privileges, which pg_dump compares with.
REVOKE ALL ON ALL TABLES IN SCHEMA webhook FROM PUBLIC;

-- Keep the rows across pg_dump / pg_restore: losing webhook.events would
-- lose the dedup of every event ever processed.
SELECT pg_catalog.pg_extension_config_dump('webhook.events', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.signature_bindings', '');
-- The archive's default partition: the days' partitions are the
-- database's own tables, which pg_dump keeps like any other.
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_log_default', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.delivery_failures', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.providers', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.provider_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.secret_uses', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.inbox', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.inbox_failures', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.requeues', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.watermarks', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.idempotency_keys', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.app_scopes', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_minutes', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_totals', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_open', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.metric_held', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.alert_rules', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.alerts', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.alerts_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.pauses', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.limits', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.limit_slots', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.breakers', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.polled', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.replays', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.replay_items', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.trace_contexts', '');
SELECT pg_catalog.pg_extension_config_dump('webhook.filters', '');

SELECT pg_catalog.set_config('search_path', '@extschema@, pg_temp', true);
