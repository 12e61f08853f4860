//! Payloads compressed before they go into the archive.
//!
//! PostgreSQL compresses a column value only once the whole row passes
//! about 2 kB (`TOAST_TUPLE_THRESHOLD`; a table's `toast_tuple_target`
//! cannot lower that trigger). Most webhook payloads are a kilobyte or two
//! of JSON that compresses by half or more, so the claim compresses the
//! payload itself, with the archive column's own compression method, and
//! the row goes in already compact: a smaller archive and less WAL. A
//! compressed value inside a row is one of PostgreSQL's ordinary on-disk
//! forms; every reader decompresses it transparently.

use crate::errors::Result;
use crate::jsonb::RawJsonb;
#[cfg(not(feature = "pg13"))]
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;
use pgrx::IntoDatum;
#[cfg(not(feature = "pg13"))]
use std::{cell::Cell, ffi::c_char};

/// Below this, compression saves too little to be worth a call.
const MIN_BYTES: usize = 256;

unsafe extern "C-unwind" {
    /// `access/toast_internals.h`: the value compressed with `cmethod`
    /// (`'\0'` for `default_toast_compression`), or NULL when that would
    /// not make it smaller.
    #[cfg(not(feature = "pg13"))]
    fn toast_compress_datum(value: pg_sys::Datum, cmethod: c_char) -> pg_sys::Datum;
    /// PostgreSQL 13 has one method (pglz) and no choice to pass.
    #[cfg(feature = "pg13")]
    fn toast_compress_datum(value: pg_sys::Datum) -> pg_sys::Datum;
}

#[cfg(not(feature = "pg13"))]
thread_local! {
    /// `attcompression` of `webhook.delivery_log.payload`, read once per
    /// backend. A DBA changing it later only changes which method new rows
    /// use from the next backend on; a column may hold both.
    static METHOD: Cell<Option<c_char>> = const { Cell::new(None) };
}

/// `attcompression` of the archive's payload column, as its character
/// code; 0 (unset) means the server's `default_toast_compression`.
#[cfg(not(feature = "pg13"))]
static PAYLOAD_COMPRESSION: Statement = Statement {
    sql:
        "SELECT pg_catalog.ascii(a.attcompression::text)
            FROM pg_catalog.pg_attribute a
           WHERE a.attrelid = 'webhook.delivery_log'::pg_catalog.regclass AND a.attname = 'payload'",
    arg_types: &[],
};

#[cfg(not(feature = "pg13"))]
fn method(client: &mut SpiClient<'_>) -> Result<c_char> {
    if let Some(m) = METHOD.get() {
        return Ok(m);
    }
    let m = match PAYLOAD_COMPRESSION.run(client, &[])?.next() {
        Some(row) => row.get::<i32>(1)?.unwrap_or(0),
        None => 0,
    };
    let m = c_char::try_from(m).unwrap_or(0);
    METHOD.set(Some(m));
    Ok(m)
}

/// A jsonb payload as the archive stores it: compressed, or as it came.
/// Only ever passed to the INSERTs that write it.
#[derive(Clone, Copy)]
pub struct ArchivedPayload(pg_sys::Datum);

impl IntoDatum for ArchivedPayload {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

/// The payload as the archive should store it: compressed when it is big
/// enough and compression pays, as it is otherwise.
pub fn for_archive(client: &mut SpiClient<'_>, payload: &RawJsonb) -> Result<ArchivedPayload> {
    if payload.size() < MIN_BYTES {
        return Ok(ArchivedPayload(payload.datum()));
    }
    // SAFETY: the datum is an in-memory (detoasted, uncompressed) jsonb
    // varlena; the result is palloc'd in the current memory context, which
    // outlives the statements of this claim. The call is guarded: an ERROR
    // inside it unwinds as a Rust panic that pgrx turns back into the
    // ERROR, never a longjmp across Rust frames.
    #[cfg(not(feature = "pg13"))]
    let compressed = {
        let cmethod = method(client)?;
        unsafe {
            pg_sys::ffi::pg_guard_ffi_boundary(|| toast_compress_datum(payload.datum(), cmethod))
        }
    };
    #[cfg(feature = "pg13")]
    let compressed = {
        let _ = client;
        unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| toast_compress_datum(payload.datum())) }
    };
    Ok(ArchivedPayload(if compressed.is_null() {
        payload.datum()
    } else {
        compressed
    }))
}
