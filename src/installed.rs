//! What the installed SQL has, for a library newer than it.
//!
//! Installing a new library and running `ALTER EXTENSION … UPDATE` are two
//! steps; between them the library meets the tables of the release before.
//! Where it writes a column that release lacks, it asks first, here, and
//! writes the way that release did (or refuses) until the column appears.

use crate::errors::Result;
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

static HAS_COLUMN: Statement = Statement {
    sql: "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute
                          WHERE attrelid = pg_catalog.to_regclass($1)
                            AND attname = $2 AND NOT attisdropped)",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

static HAS_FUNCTION: Statement = Statement {
    sql: "SELECT pg_catalog.to_regprocedure($1) IS NOT NULL",
    arg_types: &[pg_sys::TEXTOID],
};

/// A column a newer release added.
pub struct Column {
    table: &'static str,
    column: &'static str,
    /// Once the column is there it stays: remembered for the backend's
    /// life, so that asking costs nothing after the update.
    present: AtomicBool,
}

impl Column {
    pub const fn new(table: &'static str, column: &'static str) -> Self {
        Column {
            table,
            column,
            present: AtomicBool::new(false),
        }
    }

    /// Whether the installed table has it.
    pub fn present(&self, client: &mut SpiClient<'_>) -> Result<bool> {
        if self.present.load(Relaxed) {
            return Ok(true);
        }
        let present = match HAS_COLUMN
            .run(client, &[self.table.into(), self.column.into()])?
            .next()
        {
            Some(row) => row.get::<bool>(1)?.unwrap_or(false),
            None => false,
        };
        self.present.store(present, Relaxed);
        Ok(present)
    }
}

/// A function a newer release added, by its signature.
pub struct Function {
    signature: &'static str,
    present: AtomicBool,
}

impl Function {
    pub const fn new(signature: &'static str) -> Self {
        Function {
            signature,
            present: AtomicBool::new(false),
        }
    }

    /// Whether the installed SQL has it (remembered once it has).
    pub fn present(&self, client: &mut SpiClient<'_>) -> Result<bool> {
        if self.present.load(Relaxed) {
            return Ok(true);
        }
        let present = match HAS_FUNCTION.run(client, &[self.signature.into()])?.next() {
            Some(row) => row.get::<bool>(1)?.unwrap_or(false),
            None => false,
        };
        self.present.store(present, Relaxed);
        Ok(present)
    }
}
