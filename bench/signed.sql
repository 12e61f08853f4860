-- Signed GitHub deliveries for the receive scenario (psql variable
-- `signed`: how many), 1 kB bodies, each with its own event id, and the
-- providers that receive them.
SELECT webhook_register_provider('bench-github', scheme => 'github', secret => 'bench-secret', inbox => true);
SELECT webhook_register_provider('bench-github-claim', scheme => 'github', secret => 'bench-secret', inbox => false);
CREATE TABLE bench.signed AS
SELECT n, jsonb_build_object('X-GitHub-Delivery', 'd-' || n, 'X-GitHub-Event', 'push',
                             'X-Hub-Signature-256', 'sha256=' || encode(hmac(body, 'bench-secret', 'sha256'), 'hex'))
          AS headers,
       body
  FROM (SELECT n, convert_to(jsonb_set(p.payload, '{id}', to_jsonb('gh_' || n))::text, 'UTF8') AS body
          FROM bench.payloads p, generate_series(1, :signed) n WHERE p.name = '1k') s;
ALTER TABLE bench.signed ADD PRIMARY KEY (n);
-- One sequence per reader, so that no implementation meets a body another
-- already received (which would make it a duplicate). Verification alone
-- dedups nothing and is the fastest: it goes round the bodies again.
CREATE SEQUENCE bench.signed_seq;
CREATE SEQUENCE bench.signed_seq_verify MAXVALUE :signed CYCLE;
CREATE SEQUENCE bench.signed_seq_claim;
CREATE SEQUENCE bench.signed_seq_plpgsql;
CREATE SEQUENCE bench.signed_seq_ours;
VACUUM ANALYZE bench.signed;
-- The bindings an install that has been receiving for a while holds (as
-- the events table holds 100,000 processed events), for ours and for the
-- PL/pgSQL alike: a table planned while empty is read by a sequential
-- scan until it is analyzed, which would charge the first run for a
-- fresh install's first minutes.
INSERT INTO webhook.signature_bindings (provider, digest, event_id)
SELECT 'bench-github-claim', sha256(convert_to('earlier ' || n, 'UTF8')), 'earlier_' || n
  FROM generate_series(1, 100000) n;
INSERT INTO handmade.bindings
SELECT 'receive', sha256(convert_to('earlier ' || n, 'UTF8')), 'earlier_' || n
  FROM generate_series(1, 100000) n;
ANALYZE webhook.signature_bindings, handmade.bindings;
