//! SQL statements of the hot path, planned once per backend and kept.
//!
//! Each statement is prepared on first use and kept for the life of the
//! backend (`SPI_keepplan`); PostgreSQL's plan cache revalidates it by
//! itself if the tables are altered or recreated.
//!
//! Plans are generic from the first call (`CURSOR_OPT_GENERIC_PLAN`).
//! Left to choose, the plan cache would plan the first five executions in
//! every backend anew with the arguments folded in as constants: five
//! full plannings of the claim statement per connection, which is most of
//! what a short-lived connection ever runs, and a folded constant is
//! decompressed, which would undo the archive's compressed payloads.
//!
//! The exception is a statement that looks up the archive by a delivery's
//! id (`run_pruned`): the archive is partitioned by id, and a generic plan
//! locks every partition on each execution before it finds the one that
//! holds the id (PostgreSQL prunes after locking). Planned with the id in
//! hand, it names that one partition alone; an id is no payload, so
//! nothing is decompressed.
//!
//! Statements run with `read_only = false`, so in READ COMMITTED each one
//! takes a fresh snapshot and sees what committed before it started: the
//! claim relies on that after taking the event lock. A transaction id is
//! assigned only when a statement actually writes, so a claim that only
//! reads (a duplicate answered without archiving) stays a read-only
//! transaction: no commit record, no WAL.

use crate::errors::{Result, WebhookError};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;
use pgrx::{FromDatum, IntoDatum, PgMemoryContexts};
use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::ptr::NonNull;

pub struct Statement {
    pub sql: &'static str,
    pub arg_types: &'static [pg_sys::Oid],
}

/// How the plan cache plans a kept statement.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i32)]
enum Planning {
    Generic = pg_sys::CURSOR_OPT_GENERIC_PLAN as i32,
    Custom = pg_sys::CURSOR_OPT_CUSTOM_PLAN as i32,
}

thread_local! {
    static KEPT: RefCell<HashMap<(usize, Planning), NonNull<pg_sys::_SPI_plan>>> = RefCell::new(HashMap::new());
}

impl Statement {
    /// Execute the statement with `args`. The client is the proof that SPI
    /// is connected; the rows live until it disconnects.
    pub fn run<'conn>(
        &'static self,
        client: &mut SpiClient<'conn>,
        args: &[DatumWithOid<'_>],
    ) -> Result<Rows<'conn>> {
        self.execute(client, args, Planning::Generic)
    }

    /// Execute a statement whose arguments pick the archive partitions it
    /// reads (a delivery id): planned anew each time, with them in hand.
    pub fn run_pruned<'conn>(
        &'static self,
        client: &mut SpiClient<'conn>,
        args: &[DatumWithOid<'_>],
    ) -> Result<Rows<'conn>> {
        self.execute(client, args, Planning::Custom)
    }

    fn execute<'conn>(
        &'static self,
        _client: &mut SpiClient<'conn>,
        args: &[DatumWithOid<'_>],
        planning: Planning,
    ) -> Result<Rows<'conn>> {
        if args.len() != self.arg_types.len() {
            return Err(WebhookError::Internal(format!(
                "statement takes {} arguments, given {}",
                self.arg_types.len(),
                args.len()
            )));
        }
        let plan = self.plan(planning)?;
        let (mut values, mut nulls): (Vec<pg_sys::Datum>, Vec<std::ffi::c_char>) = args
            .iter()
            .map(|arg| match arg.datum() {
                Some(datum) => (datum.sans_lifetime(), b' ' as std::ffi::c_char),
                None => (pg_sys::Datum::from(0usize), b'n' as std::ffi::c_char),
            })
            .unzip();
        // SAFETY: SPI is connected (we hold its client); the plan is kept,
        // and values/nulls have one entry per argument of the plan.
        let status = unsafe {
            pg_sys::SPI_tuptable = std::ptr::null_mut();
            pg_sys::SPI_execute_plan(
                plan.as_ptr(),
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
                false,
                0,
            )
        };
        if status < 0 {
            return Err(WebhookError::Internal(format!(
                "SPI_execute_plan failed with code {status}"
            )));
        }
        // SAFETY: SPI_tuptable is what this execution returned, or NULL.
        let table = unsafe { pg_sys::SPI_tuptable };
        let len = if table.is_null() {
            0
        } else {
            // SAFETY: non-NULL tuple table of this execution.
            unsafe { (*table).numvals as usize }
        };
        Ok(Rows {
            table,
            len,
            next: 0,
            _conn: PhantomData,
        })
    }

    fn plan(&'static self, planning: Planning) -> Result<NonNull<pg_sys::_SPI_plan>> {
        let key = (self as *const Statement as usize, planning);
        if let Some(plan) = KEPT.with(|kept| kept.borrow().get(&key).copied()) {
            return Ok(plan);
        }
        let sql = std::ffi::CString::new(self.sql)
            .map_err(|_| WebhookError::Internal("statement text holds a NUL".into()))?;
        let mut types = self.arg_types.to_vec();
        // SAFETY: SPI is connected; a faulty statement raises an ERROR,
        // which pgrx's guard on the binding turns into a Rust panic.
        let plan = unsafe {
            pg_sys::SPI_prepare_cursor(
                sql.as_ptr(),
                types.len() as i32,
                types.as_mut_ptr(),
                planning as i32,
            )
        };
        let plan = NonNull::new(plan).ok_or_else(|| {
            // SAFETY: SPI_result is set by the failed SPI_prepare_cursor.
            WebhookError::Internal(format!("SPI_prepare_cursor failed with code {}", unsafe {
                pg_sys::SPI_result
            }))
        })?;
        // SAFETY: a plan just prepared, not yet kept.
        if unsafe { pg_sys::SPI_keepplan(plan.as_ptr()) } != 0 {
            return Err(WebhookError::Internal("SPI_keepplan failed".into()));
        }
        KEPT.with(|kept| kept.borrow_mut().insert(key, plan));
        Ok(plan)
    }
}

/// The rows a statement returned, valid while SPI stays connected.
pub struct Rows<'conn> {
    table: *mut pg_sys::SPITupleTable,
    len: usize,
    next: usize,
    _conn: PhantomData<&'conn ()>,
}

impl<'conn> Rows<'conn> {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many rows the statement returned, read or not.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl<'conn> Iterator for Rows<'conn> {
    type Item = Row<'conn>;

    fn next(&mut self) -> Option<Row<'conn>> {
        if self.next >= self.len {
            return None;
        }
        self.next += 1;
        Some(Row {
            table: self.table,
            index: self.next - 1,
            _conn: PhantomData,
        })
    }
}

pub struct Row<'conn> {
    table: *mut pg_sys::SPITupleTable,
    index: usize,
    _conn: PhantomData<&'conn ()>,
}

impl Row<'_> {
    /// Column `ordinal` (1-based), copied out of SPI's memory into the
    /// caller's, so it outlives the SPI connection.
    pub fn get<T: FromDatum + IntoDatum>(&self, ordinal: usize) -> Result<Option<T>> {
        // SAFETY: the table and this row index come from a live execution
        // (Rows exists only while SPI is connected), and the ordinal is
        // checked against the row's descriptor before it is read.
        unsafe {
            let table = &*self.table;
            let tupdesc = table.tupdesc;
            if ordinal == 0 || ordinal > (*tupdesc).natts as usize {
                return Err(WebhookError::Internal(format!(
                    "no result column {ordinal}"
                )));
            }
            let tuple = *table.vals.add(self.index);
            let mut is_null = false;
            let datum = pg_sys::SPI_getbinval(tuple, tupdesc, ordinal as i32, &mut is_null);
            let type_oid = pg_sys::SPI_gettypeid(tupdesc, ordinal as i32);
            let caller = PgMemoryContexts::CurrentMemoryContext
                .parent()
                .ok_or_else(|| WebhookError::Internal("SPI has no parent memory context".into()))?;
            T::try_from_datum_in_memory_context(caller, datum, is_null, type_oid)
                .map_err(|e| WebhookError::Internal(format!("result column {ordinal}: {e}")))
        }
    }
}
