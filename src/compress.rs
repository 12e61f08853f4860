//! Payloads, raw bodies and headers compressed before they go into the
//! archive.
//!
//! PostgreSQL compresses a column value only once the whole row passes
//! about 2 kB (`TOAST_TUPLE_THRESHOLD`; a table's `toast_tuple_target`
//! cannot lower that trigger). Most webhook payloads are a kilobyte or two
//! of JSON that compresses by half or more, so the claim compresses the
//! payload, the raw body and the headers itself, each with its archive
//! column's own compression method, and
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
use std::cell::Cell;
use std::ffi::c_char;

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
    /// `attcompression` of the archive's payload, raw body and headers
    /// columns, read once per backend. A DBA changing one later only
    /// changes which method new rows use from the next backend on; a
    /// column may hold both.
    static METHODS: Cell<Option<Methods>> = const { Cell::new(None) };
}

/// Each archived column's compression method, as its character code; 0
/// (unset) means the server's `default_toast_compression`.
#[derive(Clone, Copy)]
struct Methods {
    payload: c_char,
    raw_body: c_char,
    headers: c_char,
}

#[cfg(not(feature = "pg13"))]
static COLUMN_COMPRESSION: Statement = Statement {
    sql: "SELECT a.attname::text, pg_catalog.ascii(a.attcompression::text)
            FROM pg_catalog.pg_attribute a
           WHERE a.attrelid = 'webhook.delivery_log'::pg_catalog.regclass
             AND a.attname IN ('payload', 'raw_body', 'headers')",
    arg_types: &[],
};

#[cfg(not(feature = "pg13"))]
fn methods(client: &mut SpiClient<'_>) -> Result<Methods> {
    if let Some(m) = METHODS.get() {
        return Ok(m);
    }
    let mut m = Methods {
        payload: 0,
        raw_body: 0,
        headers: 0,
    };
    for row in COLUMN_COMPRESSION.run(client, &[])? {
        let code = c_char::try_from(row.get::<i32>(2)?.unwrap_or(0)).unwrap_or(0);
        match row.get::<String>(1)?.as_deref() {
            Some("payload") => m.payload = code,
            Some("raw_body") => m.raw_body = code,
            Some("headers") => m.headers = code,
            _ => {}
        }
    }
    METHODS.set(Some(m));
    Ok(m)
}

/// A jsonb value (payload, headers) as the archive stores it: compressed,
/// or as it came. Only ever passed to the INSERTs that write it.
#[derive(Clone, Copy)]
pub struct ArchivedJsonb(pg_sys::Datum);

impl IntoDatum for ArchivedJsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

/// A raw body as the archive stores it: compressed, or as it came.
#[derive(Clone, Copy)]
pub struct ArchivedBytes(pg_sys::Datum);

impl IntoDatum for ArchivedBytes {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::BYTEAOID
    }
}

/// What a delivery's archive row stores of its bodies: the payload, the
/// exact bytes received and the headers, each compressed where that pays.
#[derive(Clone, Copy)]
pub struct Archived {
    pub payload: ArchivedJsonb,
    pub raw_body: Option<ArchivedBytes>,
    pub headers: Option<ArchivedJsonb>,
}

/// A delivery's payload, raw body and headers as the archive should store
/// them: each compressed when it is big enough and compression pays, as it
/// is otherwise.
pub fn for_archive(
    client: &mut SpiClient<'_>,
    payload: &RawJsonb,
    raw_body: Option<&[u8]>,
    headers: Option<&RawJsonb>,
) -> Result<Archived> {
    let methods = column_methods(client)?;
    Ok(Archived {
        payload: ArchivedJsonb(jsonb(payload, methods.payload)),
        raw_body: raw_body.map(|bytes| ArchivedBytes(self::bytes(bytes, methods.raw_body))),
        headers: headers.map(|h| ArchivedJsonb(jsonb(h, methods.headers))),
    })
}

/// Bytes (a rejected body's prefix) as the archive's raw_body column
/// stores them.
pub fn raw_body_for_archive(client: &mut SpiClient<'_>, raw: &[u8]) -> Result<ArchivedBytes> {
    Ok(ArchivedBytes(bytes(raw, column_methods(client)?.raw_body)))
}

/// Headers alone (a rejection's), as the archive's headers column stores them.
pub fn headers_for_archive(
    client: &mut SpiClient<'_>,
    headers: Option<&RawJsonb>,
) -> Result<Option<ArchivedJsonb>> {
    let method = column_methods(client)?.headers;
    Ok(headers.map(|h| ArchivedJsonb(jsonb(h, method))))
}

#[cfg(not(feature = "pg13"))]
fn column_methods(client: &mut SpiClient<'_>) -> Result<Methods> {
    methods(client)
}

/// PostgreSQL 13 has one method (pglz) and no choice to pass.
#[cfg(feature = "pg13")]
fn column_methods(_client: &mut SpiClient<'_>) -> Result<Methods> {
    Ok(Methods {
        payload: 0,
        raw_body: 0,
        headers: 0,
    })
}

fn jsonb(value: &RawJsonb, method: c_char) -> pg_sys::Datum {
    if value.size() < MIN_BYTES {
        return value.datum();
    }
    compressed(value.datum(), method).unwrap_or_else(|| value.datum())
}

fn bytes(raw: &[u8], method: c_char) -> pg_sys::Datum {
    // A bytea varlena in the current memory context, which outlives the
    // statements of this call.
    let datum = raw
        .into_datum()
        .expect("a byte slice always makes a bytea datum");
    if raw.len() < MIN_BYTES {
        return datum;
    }
    compressed(datum, method).unwrap_or(datum)
}

/// `value` (an in-memory, uncompressed varlena) compressed with `method`,
/// or None when compression would not make it smaller.
fn compressed(value: pg_sys::Datum, method: c_char) -> Option<pg_sys::Datum> {
    // SAFETY: the result is palloc'd in the current memory context, which
    // outlives the statements of this call. The call is guarded: an ERROR
    // inside it unwinds as a Rust panic that pgrx turns back into the
    // ERROR, never a longjmp across Rust frames.
    #[cfg(not(feature = "pg13"))]
    let result =
        unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| toast_compress_datum(value, method)) };
    #[cfg(feature = "pg13")]
    let result = {
        let _ = method;
        unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| toast_compress_datum(value)) }
    };
    (!result.is_null()).then_some(result)
}
