-- pg_webhook_inbox 0.11.0 → 0.12.0 (in progress, not published).
--
-- Every change to the SQL surface since 0.11.0 lands here, until 0.12.0 is
-- recorded in sql/RELEASES; the upgrade test proves that a database
-- upgraded through this script equals a fresh install of 0.12.0.

\echo Use "ALTER EXTENSION pg_webhook_inbox UPDATE TO '0.12.0'" to load this file. \quit
