//! A zero-copy handle on a `jsonb` argument.
//!
//! pgrx's `JsonB` converts through text and serde on the way in and out,
//! which would cost a full re-parse of every payload on the claim path.
//! The claim only needs to know the top-level kind and to pass the value
//! on to its INSERT, so it keeps the datum as PostgreSQL gave it.

use crate::errors::WebhookError;
use pgrx::prelude::*;
use pgrx::{pg_sys, FromDatum, IntoDatum};

/// JSON text already validated (`input::json_object_body`) → a jsonb
/// datum, by PostgreSQL's own parser. `function` and `arg` name where the
/// text came from, for errors.
pub fn from_text(
    function: &'static str,
    arg: &'static str,
    text: &str,
) -> crate::errors::Result<RawJsonb> {
    // Validated JSON never contains a raw NUL byte, so this cannot fail;
    // stay defensive all the same.
    let cstring = std::ffi::CString::new(text).map_err(|_| WebhookError::InvalidJson {
        function,
        arg,
        detail: "It contains a NUL byte.".into(),
    })?;
    // SAFETY: jsonb_in takes a NUL-terminated C string and returns a jsonb
    // datum allocated in the current memory context, or raises an ERROR.
    let datum = unsafe {
        pgrx::direct_function_call_as_datum(
            pg_sys::jsonb_in,
            &[Some(pg_sys::Datum::from(cstring.as_ptr()))],
        )
    }
    .ok_or_else(|| WebhookError::Internal("jsonb_in returned NULL".into()))?;
    // SAFETY: the datum is a freshly built, non-NULL jsonb.
    unsafe { RawJsonb::from_datum(datum) }
        .ok_or_else(|| WebhookError::Internal("jsonb_in returned NULL".into()))
}

/// Top-level flags of a jsonb root container (`JB_FSCALAR`, `JB_FOBJECT`,
/// `JB_FARRAY` in PostgreSQL's `utils/jsonb.h`), part of the on-disk
/// format and unchanged since jsonb was introduced.
const JB_FSCALAR: u32 = 0x1000_0000;
const JB_FOBJECT: u32 = 0x2000_0000;

#[derive(Clone, Copy)]
pub struct RawJsonb {
    datum: pg_sys::Datum,
    root_header: u32,
    size: usize,
}

impl RawJsonb {
    pub fn is_object(&self) -> bool {
        self.root_header & JB_FOBJECT != 0
    }

    /// SHA-256 of the value's binary form. jsonb stores equal documents
    /// identically (keys sorted and deduplicated, no whitespace), so this
    /// tells a changed payload from a reformatted one without printing it.
    pub fn digest(&self) -> Vec<u8> {
        use sha2::{Digest, Sha256};
        // SAFETY: the datum is a detoasted jsonb varlena of `size` data bytes.
        let data = unsafe {
            std::slice::from_raw_parts(
                pgrx::vardata_any(self.datum.cast_mut_ptr()) as *const u8,
                self.size,
            )
        };
        Sha256::digest(data).to_vec()
    }

    /// The in-memory (detoasted) jsonb varlena.
    pub fn datum(&self) -> pg_sys::Datum {
        self.datum
    }

    /// Size of the jsonb value in bytes (its binary form, uncompressed).
    pub fn size(&self) -> usize {
        self.size
    }

    /// The value as serde_json, through PostgreSQL's own text output. For
    /// small values (request headers), never for payloads on the hot path.
    pub fn to_json(self) -> Option<serde_json::Value> {
        // SAFETY: the datum is a valid jsonb; jsonb_out returns a palloc'd
        // C string or raises an ERROR.
        let text = unsafe {
            pgrx::direct_function_call::<&std::ffi::CStr>(pg_sys::jsonb_out, &[Some(self.datum)])
        }?;
        serde_json::from_str(text.to_str().ok()?).ok()
    }

    pub fn kind(&self) -> &'static str {
        if self.is_object() {
            "an object"
        } else if self.root_header & JB_FSCALAR != 0 {
            "a scalar"
        } else {
            "an array"
        }
    }
}

impl FromDatum for RawJsonb {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            return None;
        }
        // Detoasting gives an in-memory copy valid for the rest of the call;
        // keeping that datum means the INSERT does not detoast it again.
        let detoasted = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
        let data = pgrx::vardata_any(detoasted) as *const u8;
        let root_header = u32::from_ne_bytes(std::ptr::read_unaligned(data as *const [u8; 4]));
        let size = pgrx::varsize_any_exhdr(detoasted);
        Some(RawJsonb {
            datum: pg_sys::Datum::from(detoasted),
            root_header,
            size,
        })
    }

    /// Values read from SPI results live in SPI's memory, freed when the
    /// SPI connection closes: copy the varlena into the caller's context.
    unsafe fn from_datum_in_memory_context(
        mut memory_context: pgrx::PgMemoryContexts,
        datum: pg_sys::Datum,
        is_null: bool,
        typoid: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            return None;
        }
        memory_context.switch_to(|_| {
            let copy = pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr());
            Self::from_polymorphic_datum(pg_sys::Datum::from(copy), false, typoid)
        })
    }
}

impl RawJsonb {
    /// Build from a freshly made jsonb datum (e.g. jsonb_in's result).
    ///
    /// # Safety
    /// `datum` must be a valid, non-NULL jsonb that outlives the value.
    pub unsafe fn from_datum(datum: pg_sys::Datum) -> Option<Self> {
        Self::from_polymorphic_datum(datum, false, pg_sys::JSONBOID)
    }
}

impl IntoDatum for RawJsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.datum)
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

// SAFETY: jsonb is a varlena; FromDatum above reads it as one and maps SQL
// NULL to None, which is all that unboxing an argument needs.
unsafe impl<'fcx> pgrx::callconv::ArgAbi<'fcx> for RawJsonb {
    unsafe fn unbox_arg_unchecked(arg: pgrx::callconv::Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        arg.unbox_arg_using_from_datum()
            .unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(
        arg: pgrx::callconv::Arg<'_, 'fcx>,
    ) -> pgrx::nullable::Nullable<Self> {
        arg.unbox_arg_using_from_datum().into()
    }
}

// SAFETY: the datum is returned to PostgreSQL as the function's jsonb result.
unsafe impl pgrx::callconv::BoxRet for RawJsonb {
    unsafe fn box_into<'fcx>(
        self,
        fcinfo: &mut pgrx::callconv::FcInfo<'fcx>,
    ) -> pgrx::datum::Datum<'fcx> {
        fcinfo.return_raw_datum(self.datum)
    }
}

impl_sql_translatable!(RawJsonb, "jsonb");

/// The value at a dotted path of a JSON document (`data.object.id`), as
/// text: a non-empty string as it is, a number in its exact JSON digits;
/// None for anything else or nothing there.
pub fn body_value(document: &serde_json::Value, path: &str) -> Option<String> {
    match path.split('.').try_fold(document, |node, key| match node {
        // A batch's events by position: `0.sg_event_id`.
        serde_json::Value::Array(items) => items.get(key.parse::<usize>().ok()?),
        _ => node.get(key),
    })? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}
