//! The extension's core guarantee, written once: a change to something
//! owned (an event a delivery claimed, an inbox row a worker leased, an
//! idempotency key a request began) is one UPDATE fenced by the owner's
//! id, made under the owner's lock. A new owner gets a new id, so an owner
//! whose lease ran out and was taken over matches nothing, whatever it
//! still believes.
//!
//! Matching nothing is never silent: the caller says where its owner
//! stands (`Standing`), and the call is refused with that standing's
//! SQLSTATE, so the caller's transaction rolls back its business writes
//! instead of committing them a second time:
//!
//! | standing   | SQLSTATE | the owner                                      |
//! |------------|----------|------------------------------------------------|
//! | `Lost`     | 55006    | ran out of lease and was taken over             |
//! | `Finished` | 55000    | finished already (completed, failed, parked)    |
//! | `Unknown`  | P0002    | never existed                                   |
//!
//! The lock is the caller's to take before: the event's or the key's
//! advisory lock (`event_lock`), or for an inbox row the row lock the
//! UPDATE takes itself. Under it, the UPDATE's own condition decides: a
//! takeover or a finish may have committed since the caller looked.

use crate::errors::{Owner, Result, Standing, WebhookError};
use crate::plans::{Row, Statement};
use pgrx::datum::DatumWithOid;
use pgrx::spi::SpiClient;

/// One owner's fenced change.
pub struct Fence {
    /// The SQL function that was called, for errors.
    pub function: &'static str,
    pub owner: Owner,
    pub id: pgrx::Uuid,
}

impl Fence {
    /// Run `update` (an UPDATE … RETURNING whose WHERE clause names the
    /// owner's id) with `args`. A row: it changed what the owner owns, and
    /// `read` reads the row. None: `diagnose` says where the owner stands,
    /// and the call is refused.
    pub fn update<T>(
        &self,
        client: &mut SpiClient<'_>,
        update: &'static Statement,
        args: &[DatumWithOid<'_>],
        read: impl FnOnce(&Row<'_>) -> Result<T>,
        diagnose: impl FnOnce(&mut SpiClient<'_>) -> Result<Standing>,
    ) -> Result<T> {
        let changed = update.run(client, args)?.next();
        match changed {
            Some(row) => read(&row),
            None => Err(self.refused(diagnose(client)?)),
        }
    }

    /// The error for an owner that may not change what it owned.
    pub fn refused(&self, standing: Standing) -> WebhookError {
        WebhookError::Fenced {
            function: self.function,
            owner: self.owner,
            id: self.id.to_string(),
            standing,
        }
    }
}
