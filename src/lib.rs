//! pg_webhook_inbox: exactly-once processing of inbound webhooks, enforced
//! by the database the handler already writes to.
//!
//! Modules, one concern each:
//! * `receive` — `webhook_receive`: verify, read the event id and type,
//!   bind unsigned ids to their signed bytes, claim, in one call;
//! * `claim` — `webhook_claim`, deciding who processes a delivery;
//! * `lifecycle` — `webhook_complete`, `webhook_fail`, `webhook_extend`;
//! * `inbox` — the durable inbox: `webhook_enqueue`, `webhook_next`,
//!   leases, backoff, waking workers;
//! * `registry` — the provider registry as webhook_receive reads it,
//!   cached per backend until it changes;
//! * `ordering` — per-entity watermarks: stale events never overwrite
//!   newer state;
//! * `requeue` — `webhook_requeue` and `webhook_requeue_dead`, for operators;
//! * `route` — a delivery's route key and slot in a tier of databases,
//!   read from signed material only;
//! * `scopes` — application roles scoped to some providers and consumers;
//! * `idempotency` — idempotency keys both ways: `webhook_outbound_key` for
//!   the calls a handler makes, and `idempotency_begin` … `_finish` for
//!   the application's own API;
//! * `verify` — `webhook_verify`, `webhook_verify_detail`, `webhook_schemes`;
//! * `schemes` — the catalog of signature schemes and one module per
//!   provider's scheme, in plain Rust;
//! * `signature` — `verify_hmac` and the HMAC primitives;
//! * `archive` — the one writer of archive rows;
//! * `session_claims` — the claims this session owns, for finishing them;
//! * `fence` — the core guarantee, once: an UPDATE fenced by its owner's
//!   id, and on zero rows a diagnosis (lost, finished, unknown);
//! * `event_lock` — the per-event (and per-signed-body) lock that keeps
//!   claims from waiting;
//! * `composite` — one row as the result of a function that always
//!   returns one;
//! * `plans` — the kept SPI plans of the hot path;
//! * `compress` — payloads compressed before they are archived;
//! * `timestamps` — RFC 3339 timestamps read once, for schemes and ordering;
//! * `status` — every status vocabulary, each mirroring its SQL enum;
//! * `input`, `errors`, `gucs`, `jsonb`, `uuid` — shared plumbing.
//!
//! Tables, views, grants and comments are plain SQL in `sql/`.

// pgrx's ErrorReport is how a #[pg_extern] raises an ERROR with its own
// SQLSTATE. It is large, and boxing it would cost an allocation on every
// refusal for nothing. And pgrx reads a table function's columns from its
// written-out return type, which no type alias may hide.
#![allow(clippy::result_large_err, clippy::type_complexity)]

use pgrx::prelude::*;

mod archive;
mod claim;
mod composite;
mod compress;
mod controls;
mod errors;
mod event_lock;
mod fence;
mod gucs;
mod idempotency;
mod inbox;
mod input;
mod installed;
mod jsonb;
mod lifecycle;
mod ordering;
pub(crate) mod out_of_date;
mod plans;
mod receive;
mod registry;
mod requeue;
mod route;
mod schemes;
mod scopes;
mod session_claims;
mod signature;
mod sources;
mod standby;
mod status;
mod timestamps;
mod trace;
mod uuid;
mod verify;

pgrx::pg_module_magic!();

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!(
    "../sql/providers.sql",
    name = "providers",
    requires = ["schema"]
);
extension_sql_file!(
    "../sql/operations.sql",
    name = "operations",
    requires = ["schema"]
);
extension_sql_file!("../sql/flow.sql", name = "flow", requires = ["operations"]);
extension_sql_file!(
    "../sql/backfill.sql",
    name = "backfill",
    requires = ["flow"]
);
extension_sql_file!(
    "../sql/replay.sql",
    name = "replay",
    requires = ["backfill"]
);
extension_sql_file!(
    "../sql/metrics.sql",
    name = "metrics",
    requires = ["replay"]
);
extension_sql_file!("../sql/alerts.sql", name = "alerts", requires = ["metrics"]);
extension_sql_file!(
    "../sql/reconciliation.sql",
    name = "reconciliation",
    requires = ["alerts"]
);
extension_sql_file!(
    "../sql/filters.sql",
    name = "filters",
    requires = ["reconciliation"]
);
extension_sql_file!("../sql/scale.sql", name = "scale", requires = ["filters"]);
extension_sql_file!("../sql/roles.sql", name = "roles", requires = ["scale"]);
extension_sql_file!("../sql/finalize.sql", name = "finalize", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::init();
}

#[cfg(any(test, feature = "pg_test"))]
#[path = "../pgrx-tests/mod.rs"]
mod in_db_tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
