//! SQL statements of the hot path, planned once per backend and kept.
//!
//! Each statement is parsed and planned on first use and the plan is kept
//! for the life of the backend (`SPI_keepplan`); PostgreSQL's plan cache
//! revalidates it by itself if the tables are altered or recreated.
//! All statements run with `read_only = false`, so in READ COMMITTED each
//! one takes a fresh snapshot and sees what committed before it started:
//! the claim relies on that after taking the event lock.

use crate::errors::Result;
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, PgOid};
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};
use std::cell::RefCell;
use std::collections::HashMap;

pub struct Statement {
    pub sql: &'static str,
    pub arg_types: &'static [pg_sys::Oid],
}

thread_local! {
    static KEPT: RefCell<HashMap<usize, OwnedPreparedStatement>> = RefCell::new(HashMap::new());
}

impl Statement {
    pub fn run<'conn>(
        &'static self,
        client: &mut SpiClient<'conn>,
        args: &[DatumWithOid<'_>],
    ) -> Result<SpiTupleTable<'conn>> {
        let key = self as *const Statement as usize;
        KEPT.with(|kept| -> Result<SpiTupleTable<'conn>> {
            let mut kept = kept.borrow_mut();
            if !kept.contains_key(&key) {
                let oids: Vec<PgOid> = self.arg_types.iter().map(|&o| PgOid::from(o)).collect();
                let plan = client.prepare_mut(self.sql, &oids)?.keep();
                kept.insert(key, plan);
            }
            let plan = &kept[&key];
            Ok(client.update(plan, None, args)?)
        })
    }
}
