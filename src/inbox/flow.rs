//! Steering what `webhook_next` hands out (the tables and the operators'
//! functions are in `sql/flow.sql`): pauses, quarantined entities,
//! concurrency caps, rates and circuit breakers.
//!
//! What steers a consumer is read from the registry's cache (`registry`),
//! dropped in every backend when a change commits. A consumer nothing
//! steers costs `webhook_next` one look at that cache: it runs the plain
//! lease statement, as if this module did not exist. A steered one has
//! its allowance worked out here before the lease statement runs:
//!
//! * paused (the consumer, or every provider the call could read): no
//!   statement at all; a paused provider among several is left out of the
//!   pick, and so is one whose breaker is open;
//! * quarantined entities' events are set aside by the pick (run_at
//!   'infinity') instead of leased, as they are met;
//! * caps and rates: free slots are taken `FOR UPDATE SKIP LOCKED` (never
//!   waiting for another worker), the batch shrinks to what they allow,
//!   and the leases made are written into the slots used. Slots taken but
//!   not used are left as they were, and free again when the transaction
//!   ends;
//! * a breaker open past its cooldown is turned half open by the one call
//!   that takes its row, and that call leases one event: the probe.
//!
//! Failures and successes of a consumer with a breaker move the breaker
//! (`failed`, `succeeded`): counted per attempt, in the transaction that
//! finishes it, so a rolled-back failure is not counted.

use crate::controls::{Controls, Limit};
use crate::errors::Result;
use crate::event_lock::EventLock;
use crate::plans::Statement;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// What a steered call of `webhook_next` may lease.
pub struct Allowance {
    /// At most this many events in all.
    pub batch: i32,
    /// Providers left out of the pick.
    pub excluded: Vec<String>,
    /// Providers whose quarantined entities the pick sets aside: those
    /// whose quarantine lock this call holds. A quarantine the cache did
    /// not know yet is left to the next call, which takes its lock.
    pub quarantining: Vec<String>,
    /// At most this many of each of these providers' events.
    pub quotas: (Vec<String>, Vec<i32>),
    /// The slots taken, to be given the leases: per limit (its provider),
    /// the slots of each kind.
    slots: Vec<Taken>,
    /// The breakers this call probes (their providers).
    probes: Vec<String>,
}

struct Taken {
    provider: String,
    kind: &'static str,
    slots: Vec<i32>,
}

/// The limit a breaker of consumer `$c`'s events of provider `$p`
/// follows: the provider's own limit with a breaker, else the consumer's.
/// Breakers are kept per provider either way, so that one provider's
/// failures never stop another's events.
macro_rules! breaker_limit {
    ($c:literal, $p:literal, $column:literal) => {
        concat!(
            "(SELECT l.",
            $column,
            " FROM webhook.limits l
               WHERE l.consumer = ",
            $c,
            " AND l.provider IN (",
            $p,
            ", '')
                 AND l.breaker_failures IS NOT NULL
               ORDER BY l.provider DESC LIMIT 1)"
        )
    };
}

/// Whether a breaker, not closed, may be probed: open past its cooldown,
/// or half open with no live probe.
macro_rules! breaker_probeable {
    ($c:literal, $p:literal) => {
        concat!(
            "((b.state = 'open' AND b.opened_at + ",
            breaker_limit!($c, $p, "breaker_cooldown"),
            " <= pg_catalog.clock_timestamp())
              OR (b.state = 'half_open' AND (b.probe IS NULL OR NOT webhook._lease_live(b.probe))))"
        )
    };
}

/// The breakers of a consumer that are not closed (one per provider):
/// for each, whether this call may try to probe it.
static OPEN_BREAKERS: Statement = Statement {
    sql: concat!(
        "SELECT b.provider, ",
        breaker_probeable!("b.consumer", "b.provider"),
        "
            FROM webhook.breakers b
           WHERE b.consumer = $1 AND b.state <> 'closed'"
    ),
    arg_types: &[pg_sys::TEXTOID],
};

/// Lock a breaker's row without waiting: None when another call holds
/// it (that one probes, or just finished).
static LOCK_BREAKER: Statement = Statement {
    sql: "SELECT true FROM webhook.breakers
           WHERE consumer = $1 AND provider = $2
             FOR UPDATE SKIP LOCKED",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Turn a breaker, locked, half open for this call's probe, if it may be
/// probed. A statement of its own after the lock: its snapshot sees what
/// the call that held the row last committed (a probe it gave out), where
/// the locking statement's own would not.
static TAKE_PROBE: Statement = Statement {
    sql: concat!(
        "UPDATE webhook.breakers b
             SET state = 'half_open', probe = NULL, changed_at = pg_catalog.now()
           WHERE b.consumer = $1 AND b.provider = $2 AND ",
        breaker_probeable!("$1", "$2"),
        "
       RETURNING true"
    ),
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// Whether a slot may be given a lease now: a lease slot whose lease is
/// no longer live, a rate slot that rested `$5` seconds since its last.
macro_rules! slot_is_free {
    () => {
        "CASE WHEN s.kind = 'lease'
              THEN s.lease_id IS NULL OR NOT webhook._lease_live(s.lease_id)
              ELSE s.used_at IS NULL
                OR s.used_at <= pg_catalog.clock_timestamp() - $5 * interval '1 second'
         END"
    };
}

/// Lock slots of a limit, of one kind, that look free, without waiting
/// for a slot another call holds.
static LOCK_SLOTS: Statement = Statement {
    sql: concat!(
        "SELECT s.n FROM webhook.limit_slots s
          WHERE s.consumer = $1 AND s.provider = $2 AND s.kind = $3::webhook.slot_kind AND ",
        slot_is_free!(),
        "
          ORDER BY s.n
          LIMIT $4
            FOR UPDATE SKIP LOCKED"
    ),
    arg_types: SLOT_ARGUMENTS,
};

/// Which of the slots locked (`$4`) are free. A statement of its own
/// after the lock, for the same reason as TAKE_PROBE: a slot whose row
/// another call changed after the locking statement began is locked in
/// its new version and rechecked, but against that statement's snapshot,
/// in which the lease just written into it is not yet live.
static FREE_SLOTS: Statement = Statement {
    sql: concat!(
        "SELECT s.n FROM webhook.limit_slots s
          WHERE s.consumer = $1 AND s.provider = $2 AND s.kind = $3::webhook.slot_kind
            AND s.n = ANY ($4) AND ",
        slot_is_free!(),
        "
          ORDER BY s.n"
    ),
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::TEXTOID,
        pg_sys::INT4ARRAYOID,
        pg_sys::FLOAT8OID,
    ],
};

/// consumer, provider, kind, how many, a rate slot's rest in seconds.
const SLOT_ARGUMENTS: &[pg_sys::Oid] = &[
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::TEXTOID,
    pg_sys::INT4OID,
    pg_sys::FLOAT8OID,
];

/// What a call of `webhook_next` by `consumer` (of `provider`, or of
/// any) may lease under its controls; None when nothing at all.
pub fn allowance(
    client: &mut SpiClient<'_>,
    controls: &Controls,
    consumer: &str,
    provider: Option<&str>,
    batch: i32,
) -> Result<Option<Allowance>> {
    if controls.paused || provider.is_some_and(|p| controls.paused_providers.iter().any(|x| x == p))
    {
        return Ok(None);
    }
    // A provider whose quarantine is being released right now is left out
    // of this call: the release must find every event set aside, and
    // waits for the calls that may still set some aside (they hold this
    // lock in share mode until their transaction ends).
    let (mut releasing, mut quarantining) = (Vec::new(), Vec::new());
    for p in &controls.quarantined {
        if provider.is_some_and(|given| given != p) {
            continue;
        }
        if EventLock::for_quarantines(p).try_acquire_shared() {
            quarantining.push(p.clone());
        } else if provider.is_some() {
            return Ok(None);
        } else {
            releasing.push(p.clone());
        }
    }
    let mut allowance = Allowance {
        batch,
        quarantining,
        excluded: [controls.paused_providers.clone(), releasing].concat(),
        quotas: Default::default(),
        slots: Vec::new(),
        probes: Vec::new(),
    };
    // The limits this call is under: all of the consumer's, or, with a
    // provider, that provider's and the consumer-wide ones.
    let limits: Vec<&Limit> = match provider {
        Some(p) => controls.limits_of(p).collect(),
        None => controls.limits.iter().collect(),
    };
    if limits.iter().any(|l| l.breaker) {
        for row in OPEN_BREAKERS.run(client, &[consumer.into()])? {
            // A breaker guards one provider's events: it holds back those
            // alone, whichever limit it follows.
            let scope = row.get::<String>(1)?.unwrap_or_default();
            if provider.is_some_and(|p| p != scope) || !controls.breaker_watches(&scope) {
                continue;
            }
            let may_probe = row.get::<bool>(2)?.unwrap_or(false)
                && LOCK_BREAKER
                    .run(client, &[consumer.into(), scope.as_str().into()])?
                    .next()
                    .is_some()
                && TAKE_PROBE
                    .run(client, &[consumer.into(), scope.as_str().into()])?
                    .next()
                    .is_some();
            if may_probe {
                allowance.limit(&scope, 1);
                allowance.probes.push(scope);
            } else if provider.is_some() {
                return Ok(None);
            } else {
                allowance.excluded.push(scope);
            }
        }
    }
    for limit in limits {
        if allowance.excluded.contains(&limit.provider) {
            continue;
        }
        let kinds = [
            ("lease", limit.cap.then_some(0.0)),
            ("rate", limit.rate_rest),
        ];
        for (kind, rest) in kinds {
            let Some(rest) = rest else { continue };
            let want = allowance.of(&limit.provider);
            let slots = match want {
                0 => Vec::new(),
                _ => take_slots(client, consumer, &limit.provider, kind, want, rest)?,
            };
            allowance.limit(&limit.provider, slots.len() as i32);
            allowance.slots.push(Taken {
                provider: limit.provider.clone(),
                kind,
                slots,
            });
        }
    }
    if allowance.batch == 0 {
        return Ok(None);
    }
    // A provider allowed nothing is left out of the pick altogether.
    let (mut providers, mut quotas) = (Vec::new(), Vec::new());
    for (p, q) in allowance.quotas.0.iter().zip(&allowance.quotas.1) {
        if *q == 0 {
            allowance.excluded.push(p.clone());
        } else {
            providers.push(p.clone());
            quotas.push(*q);
        }
    }
    allowance.quotas = (providers, quotas);
    Ok(Some(allowance))
}

/// Internal functions, in the extension's own schema.
#[pgrx::pg_schema]
mod webhook {
    use crate::event_lock::EventLock;

    /// Wait until no call of `webhook_next` may still set aside events of
    /// the provider's quarantined entities, and keep others from starting
    /// until the transaction ends: what `webhook_release` runs first.
    #[pgrx::pg_extern(volatile, parallel_unsafe, name = "_lock_quarantines")]
    fn lock_quarantines(provider: &str) {
        EventLock::for_quarantines(provider).acquire();
    }
}

/// Up to `want` free slots of a limit, locked until the transaction ends.
fn take_slots(
    client: &mut SpiClient<'_>,
    consumer: &str,
    provider: &str,
    kind: &str,
    want: i32,
    rest: f64,
) -> Result<Vec<i32>> {
    let mut locked = Vec::new();
    for row in LOCK_SLOTS.run(
        client,
        &[
            consumer.into(),
            provider.into(),
            kind.into(),
            want.into(),
            rest.into(),
        ],
    )? {
        locked.extend(row.get::<i32>(1)?);
    }
    if locked.is_empty() {
        return Ok(locked);
    }
    let mut free = Vec::with_capacity(locked.len());
    for row in FREE_SLOTS.run(
        client,
        &[
            consumer.into(),
            provider.into(),
            kind.into(),
            locked.into(),
            rest.into(),
        ],
    )? {
        free.extend(row.get::<i32>(1)?);
    }
    Ok(free)
}

impl Allowance {
    /// How many this call may lease within a scope ('' : in all).
    fn of(&self, scope: &str) -> i32 {
        if scope.is_empty() {
            return self.batch;
        }
        let quota = self.quotas.0.iter().position(|p| p == scope);
        quota.map_or(self.batch, |n| self.quotas.1[n].min(self.batch))
    }

    /// Allow at most `n` within a scope.
    fn limit(&mut self, scope: &str, n: i32) {
        if scope.is_empty() {
            self.batch = self.batch.min(n);
            return;
        }
        match self.quotas.0.iter().position(|p| p == scope) {
            Some(at) => self.quotas.1[at] = self.quotas.1[at].min(n),
            None => {
                self.quotas.0.push(scope.to_owned());
                self.quotas.1.push(n);
            }
        }
    }
}

/// Give the slots taken (and the probes) the leases made: `leased` is
/// each lease's id and provider, in the order the call returns them.
static GIVE_SLOTS: Statement = Statement {
    sql: "UPDATE webhook.limit_slots s
             SET lease_id = g.lease_id, used_at = pg_catalog.clock_timestamp()
            FROM unnest($2::text[], $3::webhook.slot_kind[], $4::int4[], $5::uuid[])
                 AS g (provider, kind, n, lease_id)
           WHERE s.consumer = $1 AND s.provider = g.provider AND s.kind = g.kind AND s.n = g.n",
    arg_types: &[
        pg_sys::TEXTOID,
        pg_sys::TEXTARRAYOID,
        pg_sys::TEXTARRAYOID,
        pg_sys::INT4ARRAYOID,
        pg_sys::UUIDARRAYOID,
    ],
};

static GIVE_PROBE: Statement = Statement {
    sql: "UPDATE webhook.breakers SET probe = $3 WHERE consumer = $1 AND provider = $2",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::UUIDOID],
};

/// Record what a steered call leased.
pub fn record(
    client: &mut SpiClient<'_>,
    allowance: &Allowance,
    consumer: &str,
    leased: &[(pgrx::Uuid, &str)],
) -> Result<()> {
    let (mut providers, mut kinds, mut ns, mut ids) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for taken in &allowance.slots {
        let mine = leased
            .iter()
            .filter(|(_, p)| taken.provider.is_empty() || *p == taken.provider);
        for (slot, (id, _)) in taken.slots.iter().zip(mine) {
            providers.push(taken.provider.clone());
            kinds.push(taken.kind);
            ns.push(*slot);
            ids.push(*id);
        }
    }
    if !ns.is_empty() {
        GIVE_SLOTS.run(
            client,
            &[
                consumer.into(),
                providers.into(),
                kinds.into(),
                ns.into(),
                ids.into(),
            ],
        )?;
    }
    for scope in &allowance.probes {
        let probe = leased.iter().find(|(_, p)| scope.is_empty() || p == scope);
        if let Some((id, _)) = probe {
            GIVE_PROBE.run(
                client,
                &[consumer.into(), scope.as_str().into(), (*id).into()],
            )?;
        }
    }
    Ok(())
}

/// Count `n` failed attempts of a consumer's events of a provider against
/// the provider's breaker, made by its first failure: it opens when it
/// reaches its limit's threshold (a failed probe reopens a half-open one,
/// from now).
static FAILED: Statement = Statement {
    sql: concat!(
        "WITH l AS (SELECT ",
        breaker_limit!("$1", "$2", "breaker_failures"),
        " AS threshold)
          INSERT INTO webhook.breakers AS b (consumer, provider, failures, state, opened_at)
          SELECT $1, $2, $3,
                 CASE WHEN $3 >= l.threshold THEN 'open' ELSE 'closed' END::webhook.breaker_state,
                 CASE WHEN $3 >= l.threshold THEN pg_catalog.clock_timestamp() END
            FROM l WHERE l.threshold IS NOT NULL
          ON CONFLICT ON CONSTRAINT breakers_pkey DO UPDATE
             SET failures = b.failures + $3,
                 state = CASE WHEN b.state = 'half_open' OR b.failures + $3 >= (SELECT threshold FROM l)
                              THEN 'open' ELSE b.state END,
                 opened_at = CASE WHEN b.state = 'half_open'
                                    OR (b.state = 'closed' AND b.failures + $3 >= (SELECT threshold FROM l))
                                  THEN pg_catalog.clock_timestamp() ELSE b.opened_at END,
                 probe = CASE WHEN b.state = 'half_open' THEN NULL ELSE b.probe END,
                 changed_at = CASE WHEN b.state = 'half_open'
                                     OR (b.state = 'closed' AND b.failures + $3 >= (SELECT threshold FROM l))
                                   THEN pg_catalog.now() ELSE b.changed_at END"
    ),
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID, pg_sys::INT4OID],
};

/// A success closes the breaker of a consumer's events of a provider and
/// forgets its failures; a breaker with nothing to forget is not written
/// (nor locked).
static SUCCEEDED: Statement = Statement {
    sql: "UPDATE webhook.breakers b
             SET failures = 0, state = 'closed', probe = NULL,
                 changed_at = CASE WHEN b.state <> 'closed' THEN pg_catalog.now() ELSE b.changed_at END
           WHERE b.consumer = $1 AND b.provider = $2
             AND (b.failures > 0 OR b.state <> 'closed')",
    arg_types: &[pg_sys::TEXTOID, pg_sys::TEXTOID],
};

/// `n` attempts of `consumer`'s events of `provider` failed.
pub fn failed(client: &mut SpiClient<'_>, consumer: &str, provider: &str, n: i32) -> Result<()> {
    if watched(client, consumer, provider)? {
        FAILED.run(client, &[consumer.into(), provider.into(), n.into()])?;
    }
    Ok(())
}

/// An attempt of `consumer`'s events of `provider` succeeded.
pub fn succeeded(client: &mut SpiClient<'_>, consumer: &str, provider: &str) -> Result<()> {
    if watched(client, consumer, provider)? {
        SUCCEEDED.run(client, &[consumer.into(), provider.into()])?;
    }
    Ok(())
}

fn watched(client: &mut SpiClient<'_>, consumer: &str, provider: &str) -> Result<bool> {
    Ok(crate::registry::controls(client, consumer)?
        .is_some_and(|controls| controls.breaker_watches(provider)))
}
