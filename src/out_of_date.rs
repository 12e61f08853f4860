//! C symbols this library no longer implements, kept as stubs that say
//! what to do.
//!
//! Installing a new library and running `ALTER EXTENSION pg_webhook_inbox
//! UPDATE` are two steps. Between them, a database runs the SQL of the
//! release it was on, whose functions name C symbols of this library. For
//! the previous published release, every such symbol keeps working: where
//! one's signature changes, a thin adapter keeps the old one beside it,
//! until the release after next (see CONTRIBUTING.md, "Releases"). A symbol
//! only SQL older than that names is listed here instead: calling it raises
//! `undefined_function` (42883) with the hint to update, rather than
//! PostgreSQL's "could not find function … in file", which says nothing of
//! the cause. (PostGIS keeps its removed C functions the same way, in
//! `postgis_legacy.c`.)
//!
//! A test checks that the current SQL names none of these symbols.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// For each symbol: the version-1 calling convention's info record
/// (`pg_finfo_<symbol>`, without which PostgreSQL refuses to call it) and
/// the function itself, which raises the error; then `SYMBOLS`, the list.
macro_rules! out_of_date {
    ($($symbol:ident),+ $(,)?) => {
        $(
            #[allow(non_snake_case)]
            mod $symbol {
                use super::*;

                #[export_name = concat!("pg_finfo_", stringify!($symbol))]
                extern "C" fn info() -> &'static pg_sys::Pg_finfo_record {
                    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
                    &V1
                }

                #[pg_guard]
                #[export_name = stringify!($symbol)]
                extern "C-unwind" fn call(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
                    refuse(stringify!($symbol))
                }
            }
        )+

        /// The symbols stubbed here.
        #[allow(dead_code)]
        pub const SYMBOLS: &[&str] = &[$(stringify!($symbol)),+];
    };
}

fn refuse(symbol: &str) -> ! {
    pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
        format!(
            "pg_webhook_inbox: this database's SQL for the extension is older than its library \
             (the library no longer has {symbol})"
        ),
        "pg_webhook_inbox",
    )
    .set_hint(
        "Run: ALTER EXTENSION pg_webhook_inbox UPDATE. (A development version older than \
         0.10.0, the first published release, has no update path: recreate the extension, \
         see CHANGELOG.md.)",
    )
    .report(PgLogLevel::ERROR);
    unreachable!("an ERROR does not return")
}

// Named by the SQL of the development versions before 0.10.0, the first
// published release, and by none since.
out_of_date!(
    begin_request_wrapper,
    receive_body_text_wrapper,
    receive_body_wrapper,
    receive_delivery_text_wrapper,
    receive_delivery_wrapper,
    receive_request_text_wrapper,
    receive_request_wrapper,
    webhook_claim_raw_wrapper,
    webhook_claim_text_wrapper,
    webhook_claim_wrapper,
    webhook_complete_wrapper,
    webhook_enqueue_raw_wrapper,
    webhook_enqueue_text_wrapper,
    webhook_enqueue_wrapper,
    webhook_fail_wrapper,
    webhook_next_wrapper,
    webhook_receive_text_wrapper,
    webhook_receive_wrapper,
    webhook_requeue_wrapper,
    webhook_schemes_wrapper,
    webhook_verify_detail_text_wrapper,
    webhook_verify_detail_wrapper,
    webhook_verify_text_wrapper,
    webhook_verify_wrapper,
);
