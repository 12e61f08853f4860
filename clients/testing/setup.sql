-- The database every client library's suite runs against: the extension,
-- the providers the shared cases (cases.json) deliver to, the business
-- table the handlers write, and the application role the suites connect
-- as, which has EXECUTE on the handler functions and nothing else of the
-- extension's.
CREATE EXTENSION pg_webhook_inbox;
SELECT webhook_register_provider('stripe', secret => 'whsec_clients_suite', inbox => false);
SELECT webhook_register_provider('stripe_inbox', scheme => 'stripe', secret => 'whsec_clients_suite', inbox => true);
SELECT webhook_register_provider('slack', secret => 'slack_clients_suite', inbox => false);
CREATE TABLE orders (
    provider text NOT NULL,
    event_id text NOT NULL,
    event_type text,
    handler text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
-- What the READMEs' ten-line handlers write, each run as it is printed.
CREATE TABLE invoices_paid (event_id text NOT NULL);
SELECT webhook_grant_app('clients_app');
GRANT SELECT, INSERT ON orders, invoices_paid TO clients_app;
