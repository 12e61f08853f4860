//! One composite row as a function's result.
//!
//! A function that always answers one row returns its SQL composite type
//! (`webhook.claim_result`, `webhook.receive_result`) rather than a set:
//! the executor calls it once, where the set-returning protocol enters it
//! twice, and every entry of a `SECURITY DEFINER` function switches
//! `search_path` and back.

use crate::errors::{Result, WebhookError};
use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::{AllocatedByRust, IntoDatum, PgTupleDesc};

/// What a function declared `RETURNS <composite>` returns.
pub type Row = PgHeapTuple<'static, AllocatedByRust>;

/// The row of `values`, in the order of the columns of the composite type
/// the called function (`fcinfo`) is declared to return.
pub fn of_call(
    fcinfo: pg_sys::FunctionCallInfo,
    values: Vec<Option<pg_sys::Datum>>,
) -> Result<Row> {
    let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
    // SAFETY: fcinfo is the call's own; for a composite result type this
    // sets tupdesc to a copy in the current memory context.
    let class = unsafe { pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc) };
    if class != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || tupdesc.is_null() {
        return Err(WebhookError::Internal(
            "the function is not declared to return a composite type".into(),
        ));
    }
    // SAFETY: tupdesc is a copy nobody else frees, and it describes the
    // type the values were built for (its column count is checked).
    let tupdesc = unsafe { PgTupleDesc::from_pg_copy(tupdesc) };
    unsafe { PgHeapTuple::from_datums(tupdesc, values) }
        .map_err(|e| WebhookError::Internal(format!("result row: {e}")))
}

/// A value as a column of a result row.
pub fn value<T: IntoDatum>(value: T) -> Option<pg_sys::Datum> {
    value.into_datum()
}
