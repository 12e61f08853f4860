//! pg_webhook_inbox: exactly-once processing of inbound webhooks, enforced
//! by the database the handler already writes to.
//!
//! Modules, one concern each:
//! * `claim` — `webhook_claim`, deciding who processes a delivery;
//! * `lifecycle` — `webhook_complete`, `webhook_fail`, `webhook_extend`;
//! * `signature` — `verify_hmac`;
//! * `schemes` — `webhook_verify`, the catalog of schemes and their aliases
//!   (`webhook_schemes`), one module per provider's scheme;
//! * `receive` — `webhook_receive`: verify, extract, bind unsigned ids to
//!   their signed bytes, claim, in one call;
//! * `operations` — `webhook_requeue`;
//! * `event_lock` — the per-event (and per-signed-body) lock that keeps
//!   claims from waiting;
//! * `plans` — the kept SPI plans of the hot path;
//! * `compress` — payloads compressed before they are archived;
//! * `input`, `errors`, `gucs`, `jsonb`, `uuid` — shared plumbing.
//!
//! Tables, grants and comments are plain SQL in `sql/`.

use pgrx::prelude::*;

mod claim;
mod compress;
mod errors;
mod event_lock;
mod gucs;
mod input;
mod jsonb;
mod lifecycle;
mod operations;
mod plans;
mod receive;
mod schemes;
mod signature;
mod uuid;

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
