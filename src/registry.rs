//! The provider registry as `webhook_receive` reads it, and the
//! application roles' scopes (`scopes`), cached per backend.
//!
//! Reading a provider (its entry, and its active secrets aggregated newest
//! first) costs a join and a GROUP BY; the registry changes a few times a
//! year. Each backend keeps what it read, until the registry changes:
//!
//! * a statement trigger on `webhook.providers`,
//!   `webhook.provider_secrets` and `webhook.app_scopes`
//!   (`webhook_registry_changed`, enabled
//!   ALWAYS, so that it fires under `session_replication_role = replica`
//!   too: a restore, a logical replication apply) sends a relcache
//!   invalidation for the table it fired on, which PostgreSQL delivers to
//!   every backend when the change commits (and to the changing backend
//!   at once, and again if it rolls back);
//! * before each look at the cache, the backend takes in the
//!   invalidations committed since it last did, also in the middle of a
//!   transaction;
//! * each backend's relcache callback (`invalidated`) drops the cache
//!   when that invalidation names one of these tables, or is a reset of
//!   every relation (after a backend fell too far behind).
//!
//! A backend keeps only what it read with a snapshot taken after every
//! invalidation it had processed (one per SPI statement, under READ
//! COMMITTED), and only if no invalidation arrived while it read: a change
//! committed after that snapshot sends its invalidation later, and drops
//! the entry then. Under REPEATABLE READ or SERIALIZABLE the transaction's
//! snapshot may be older than that, so nothing read there is kept.
//!
//! Secrets kept here live in the backend's private memory, as they do
//! while a delivery is verified; the registry's tables stay readable by
//! the extension owner only.

use crate::controls::Controls;
use crate::errors::{Result, WebhookError};
use crate::plans::Statement;
use crate::schemes::Scheme;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

const FUNCTION: &str = "webhook_receive";

/// The tables whose changes drop what a backend kept, as oids, in SQL:
/// the registry's two, the application roles' scopes, what steers the
/// inbox, and the filters (each of these NULL until the release that made
/// its table is installed).
macro_rules! watched_tables {
    () => {
        "'webhook.providers'::pg_catalog.regclass::pg_catalog.oid,
         'webhook.provider_secrets'::pg_catalog.regclass::pg_catalog.oid,
         pg_catalog.to_regclass('webhook.app_scopes')::pg_catalog.oid,
         pg_catalog.to_regclass('webhook.pauses')::pg_catalog.oid,
         pg_catalog.to_regclass('webhook.limits')::pg_catalog.oid,
         pg_catalog.to_regclass('webhook.filters')::pg_catalog.oid"
    };
}

/// How many tables `watched_tables!` names.
const WATCHED_TABLES: usize = 6;
/// Where the tables a later release made stand in `watched_tables!`.
const APP_SCOPES: usize = 2;
const PAUSES: usize = 3;
const FILTERS: usize = 5;
type Watched = [pg_sys::Oid; WATCHED_TABLES];
const UNKNOWN: Watched = [pg_sys::InvalidOid; WATCHED_TABLES];

/// The watched tables' oids, from the columns of a row starting at
/// `first` (1-based).
fn watched_from(row: &crate::plans::Row<'_>, first: usize) -> Result<Watched> {
    let mut tables = UNKNOWN;
    for (n, table) in tables.iter_mut().enumerate() {
        *table = row
            .get::<pg_sys::Oid>(first + n)?
            .unwrap_or(pg_sys::InvalidOid);
    }
    Ok(tables)
}

/// A provider as webhook_receive uses it: its registry entry and its
/// active secrets, newest first.
pub struct Provider {
    pub scheme: Scheme,
    pub tolerance: i64,
    pub event_id_from: String,
    pub event_type_from: String,
    pub secrets: Vec<Option<String>>,
    /// The secrets' fingerprints, in the same order.
    pub fingerprints: Vec<Option<String>>,
    /// Registered in inbox mode.
    pub inbox: bool,
    /// Registered with ordering: where the entity key and the order value
    /// are in the body.
    pub ordering: Option<(String, String)>,
}

/// The provider's registry entry and active secrets, newest first, with
/// the oids of the watched tables (what the relcache callback watches).
static LOAD_PROVIDER: Statement = Statement {
    sql: concat!(
        "SELECT p.scheme,
                 pg_catalog.date_part('epoch', p.tolerance)::int8,
                 p.event_id_from,
                 p.event_type_from,
                 pg_catalog.array_agg(s.secret ORDER BY s.added_at DESC)
                     FILTER (WHERE s.secret IS NOT NULL AND s.retired_at IS NULL),
                 pg_catalog.array_agg(s.fingerprint ORDER BY s.added_at DESC)
                     FILTER (WHERE s.secret IS NOT NULL AND s.retired_at IS NULL),
                 p.inbox,
                 p.entity_key_from,
                 p.order_from, ",
        watched_tables!(),
        "
            FROM webhook.providers p
            LEFT JOIN webhook.provider_secrets s ON s.provider = p.name
           WHERE p.name = $1
           GROUP BY p.name"
    ),
    arg_types: &[pg_sys::TEXTOID],
};

/// Read a provider from the registry, with the watched tables.
fn load(client: &mut SpiClient<'_>, name: &str) -> Result<(Provider, Watched)> {
    let rows = LOAD_PROVIDER.run(client, &[name.into()])?;
    let row = rows
        .into_iter()
        .next()
        .ok_or_else(|| WebhookError::UnknownProvider {
            function: FUNCTION,
            arg: "provider",
            given: name.to_string(),
        })?;
    // The registry only holds schemes that parsed when registered.
    let scheme = Scheme::parse(
        FUNCTION,
        "provider",
        &row.get::<String>(1)?.unwrap_or_default(),
    )?;
    // NULL: the scheme signs no timestamp, or the DBA left it to the scheme.
    let tolerance = row
        .get::<i64>(2)?
        .unwrap_or_else(|| scheme.default_tolerance());
    let tables = watched_from(&row, 10)?;
    let provider = Provider {
        scheme,
        tolerance,
        event_id_from: row.get::<String>(3)?.unwrap_or_default(),
        event_type_from: row.get::<String>(4)?.unwrap_or_default(),
        secrets: row.get::<Vec<Option<String>>>(5)?.unwrap_or_default(),
        fingerprints: row.get::<Vec<Option<String>>>(6)?.unwrap_or_default(),
        inbox: row.get::<bool>(7)?.unwrap_or(false),
        ordering: row.get::<String>(8)?.zip(row.get::<String>(9)?),
    };
    Ok((provider, tables))
}

/// Something a backend read from the watched tables, under the
/// invalidation generation it was read in: looked at in a later one, it is
/// empty again.
struct Kept<T> {
    generation: u64,
    value: T,
}

impl<T: Default> Kept<T> {
    fn empty() -> Self {
        Kept {
            generation: 0,
            value: T::default(),
        }
    }

    /// The value as of `generation`: emptied if an invalidation came since
    /// it was read.
    fn at(&mut self, generation: u64) -> &mut T {
        if self.generation != generation {
            self.generation = generation;
            self.value = T::default();
        }
        &mut self.value
    }
}

type Cache<T> = std::thread::LocalKey<RefCell<Kept<T>>>;

/// Look at what `cache` holds as of `generation`.
fn look<T: Default, R>(
    cache: &'static Cache<T>,
    generation: u64,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    cache.with(|kept| f(kept.borrow_mut().at(generation)))
}

/// Keep in `cache` what was read in `generation`, if it may be kept
/// (`may_keep`).
fn keep<T: Default>(cache: &'static Cache<T>, generation: u64, f: impl FnOnce(&mut T)) {
    if may_keep(generation) {
        look(cache, generation, f);
    }
}

thread_local! {
    /// Bumped by every invalidation of the registry's tables. The callback
    /// only bumps it: it runs inside PostgreSQL's invalidation processing,
    /// where nothing may fail or be borrowed twice.
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    /// The watched tables, once known; until then every relcache
    /// invalidation counts.
    static WATCHED: Cell<Watched> = const { Cell::new(UNKNOWN) };
    static CALLBACK_REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// The providers read, by name.
    static PROVIDERS: RefCell<Kept<HashMap<String, Rc<Provider>>>> = RefCell::new(Kept::empty());
}

/// The relcache callback: a change to a registry table (or a reset of all
/// relations) invalidates what this backend read.
#[pg_guard]
unsafe extern "C-unwind" fn invalidated(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let watched = WATCHED.get();
    let unknown = watched == UNKNOWN;
    if unknown || relid == pg_sys::InvalidOid || watched.contains(&relid) {
        GENERATION.set(GENERATION.get().wrapping_add(1));
    }
}

/// Register the relcache callback, once per backend.
fn ensure_callback() {
    if !CALLBACK_REGISTERED.get() {
        // SAFETY: registered once per backend, with a callback that lives
        // as long as the library; PostgreSQL has room for many.
        unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(invalidated), pg_sys::Datum::from(0)) };
        CALLBACK_REGISTERED.set(true);
    }
}

/// The generation the cache stands at, once the invalidations committed
/// since this transaction last looked are taken in: a statement in an open
/// transaction that already holds its locks would otherwise not see them
/// before the cache is consulted.
fn current_generation() -> u64 {
    ensure_callback();
    // SAFETY: processes pending shared invalidation messages, as every
    // lock acquisition does.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    GENERATION.get()
}

/// Whether what was read in `generation` may be kept: read with a fresh
/// snapshot (under REPEATABLE READ or SERIALIZABLE the transaction's may
/// predate a change), no invalidation arrived since, and the registry's
/// tables are known, so that the callback can tell when it expires.
fn may_keep(generation: u64) -> bool {
    // SAFETY: reads the session's isolation level.
    let fresh_snapshots = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    fresh_snapshots && GENERATION.get() == generation && WATCHED.get() != UNKNOWN
}

/// The provider `name`, from the cache when nothing changed since it was
/// read.
pub fn provider(client: &mut SpiClient<'_>, name: &str) -> Result<Rc<Provider>> {
    current_generation();
    cached_provider(client, name)
}

/// `provider`, once the invalidations are taken in.
fn cached_provider(client: &mut SpiClient<'_>, name: &str) -> Result<Rc<Provider>> {
    let generation = GENERATION.get();
    if let Some(provider) = look(&PROVIDERS, generation, |providers| {
        providers.get(name).cloned()
    }) {
        return Ok(provider);
    }
    let (provider, tables) = load(client, name)?;
    let provider = Rc::new(provider);
    WATCHED.set(tables);
    keep(&PROVIDERS, generation, |providers| {
        providers.insert(name.to_string(), Rc::clone(&provider));
    });
    Ok(provider)
}

thread_local! {
    /// Provider names read and found unregistered: `webhook_claim` and
    /// `webhook_enqueue` serve providers nobody registered, and must not
    /// query for them each time.
    static ABSENT: RefCell<Kept<HashSet<String>>> = RefCell::new(Kept::empty());
}

/// The provider `name` if it is registered, None if not; both answers
/// kept until the registry changes.
pub fn registered(client: &mut SpiClient<'_>, name: &str) -> Result<Option<Rc<Provider>>> {
    let generation = current_generation();
    if look(&ABSENT, generation, |absent| absent.contains(name)) {
        return Ok(None);
    }
    match cached_provider(client, name) {
        Ok(provider) => Ok(Some(provider)),
        Err(WebhookError::UnknownProvider { .. }) => {
            // An absent provider's row names no tables: learn them once, or
            // nothing could tell this answer when to expire.
            if WATCHED.get() == UNKNOWN {
                learn_tables(client)?;
            }
            keep(&ABSENT, generation, |absent| {
                absent.insert(name.to_string());
            });
            Ok(None)
        }
        Err(err) => Err(err),
    }
}

/// The tables the relcache callback watches.
static TABLES: Statement = Statement {
    sql: concat!("SELECT ", watched_tables!()),
    arg_types: &[],
};

fn learn_tables(client: &mut SpiClient<'_>) -> Result<()> {
    if let Some(row) = TABLES.run(client, &[])?.next() {
        WATCHED.set(watched_from(&row, 1)?);
    }
    Ok(())
}

/// Whether the watched table at `index`, made by a later release than the
/// first, is installed. Until `ALTER EXTENSION … UPDATE` brings it, it is
/// looked for again each time: its creation sends no invalidation this
/// backend would be watching for.
fn installed(client: &mut SpiClient<'_>, index: usize) -> Result<bool> {
    if WATCHED.get()[index] == pg_sys::InvalidOid {
        learn_tables(client)?;
    }
    Ok(WATCHED.get()[index] != pg_sys::InvalidOid)
}

/// Whether any provider is registered with `fifo`: `webhook_next` takes
/// FIFO lines' locks only then. Kept like the providers, until the
/// registry changes.
static ANY_FIFO: Statement = Statement {
    sql: concat!(
        "SELECT EXISTS (SELECT FROM webhook.providers WHERE fifo), ",
        watched_tables!()
    ),
    arg_types: &[],
};

thread_local! {
    static ANY_FIFO_KNOWN: RefCell<Kept<Option<bool>>> = RefCell::new(Kept::empty());
}

pub fn any_fifo(client: &mut SpiClient<'_>) -> Result<bool> {
    let generation = current_generation();
    if let Some(answer) = look(&ANY_FIFO_KNOWN, generation, |known| *known) {
        return Ok(answer);
    }
    let Some(row) = ANY_FIFO.run(client, &[])?.next() else {
        return Ok(false);
    };
    let answer = row.get::<bool>(1)?.unwrap_or(false);
    WATCHED.set(watched_from(&row, 2)?);
    keep(&ANY_FIFO_KNOWN, generation, |known| *known = Some(answer));
    Ok(answer)
}

/// An application role's scope (`webhook.app_scopes`, see `scopes`).
#[derive(Clone)]
pub struct AppScope {
    pub role: pg_sys::Oid,
    pub providers: Vec<String>,
    /// None: every consumer of those providers.
    pub consumers: Option<Vec<String>>,
}

static LOAD_SCOPES: Statement = Statement {
    sql: "SELECT role::pg_catalog.oid, providers, consumers FROM webhook.app_scopes",
    arg_types: &[],
};

thread_local! {
    static SCOPES: RefCell<Kept<Option<Rc<Vec<AppScope>>>>> = RefCell::new(Kept::empty());
}

/// Every application role's scope, kept like the providers until the
/// registry or the scopes change. Usually none: then every application
/// function pays one look at this cache.
pub fn app_scopes(client: &mut SpiClient<'_>) -> Result<Rc<Vec<AppScope>>> {
    let generation = current_generation();
    if let Some(scopes) = look(&SCOPES, generation, |scopes| scopes.clone()) {
        return Ok(scopes);
    }
    if !installed(client, APP_SCOPES)? {
        // Nobody is scoped before the release that made the table.
        return Ok(Rc::new(Vec::new()));
    }
    let scopes = LOAD_SCOPES
        .run(client, &[])?
        .map(|row| {
            Ok(AppScope {
                role: row.get::<pg_sys::Oid>(1)?.unwrap_or(pg_sys::InvalidOid),
                providers: row.get::<Vec<String>>(2)?.unwrap_or_default(),
                consumers: row.get::<Vec<String>>(3)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let scopes = Rc::new(scopes);
    keep(&SCOPES, generation, |kept| *kept = Some(Rc::clone(&scopes)));
    Ok(scopes)
}

/// What steers a consumer's leases (`inbox::flow`), read with the
/// watched tables.
static LOAD_CONTROLS: Statement = Statement {
    sql: concat!(crate::controls::load_controls!(), watched_tables!()),
    arg_types: &[pg_sys::TEXTOID],
};

/// Where the watched tables' oids start in a row of LOAD_CONTROLS.
const CONTROLS_WATCHED_FROM: usize = 8;

thread_local! {
    /// What steers each consumer read, None where nothing does.
    static CONTROLS: RefCell<Kept<HashMap<String, Option<Rc<Controls>>>>> = RefCell::new(Kept::empty());
}

/// What steers a consumer's leases (pauses, quarantines, limits), None
/// when nothing does: kept like the providers, until the registry, the
/// pauses or the limits change. How many consumers a backend remembers is
/// bounded, whatever callers pass.
pub fn controls(client: &mut SpiClient<'_>, consumer: &str) -> Result<Option<Rc<Controls>>> {
    const MAX_CONSUMERS: usize = 256;
    let generation = current_generation();
    if let Some(controls) = look(&CONTROLS, generation, |kept| kept.get(consumer).cloned()) {
        return Ok(controls);
    }
    if !installed(client, PAUSES)? {
        // Nothing steers before the release that made the tables.
        return Ok(None);
    }
    let Some(row) = LOAD_CONTROLS.run(client, &[consumer.into()])?.next() else {
        return Ok(None);
    };
    let controls = crate::controls::controls_from(&row)?.map(Rc::new);
    WATCHED.set(watched_from(&row, CONTROLS_WATCHED_FROM)?);
    keep(&CONTROLS, generation, |kept| {
        if kept.len() >= MAX_CONSUMERS {
            kept.clear();
        }
        kept.insert(consumer.to_string(), controls.clone());
    });
    Ok(controls)
}

/// The providers that have a filter (`webhook.filters`), read with the
/// watched tables.
static LOAD_FILTERED: Statement = Statement {
    sql: concat!(
        "SELECT (SELECT pg_catalog.array_agg(DISTINCT f.provider) FROM webhook.filters f), ",
        watched_tables!()
    ),
    arg_types: &[],
};

thread_local! {
    static FILTERED: RefCell<Kept<Option<Rc<HashSet<String>>>>> = RefCell::new(Kept::empty());
}

/// Whether the provider `name` has a filter: `webhook_receive` judges only
/// their deliveries, and every other one pays one look at this cache. Kept
/// like the providers, until the registry or the filters change.
pub fn has_filter(client: &mut SpiClient<'_>, name: &str) -> Result<bool> {
    let generation = current_generation();
    if let Some(filtered) = look(&FILTERED, generation, |kept| kept.clone()) {
        return Ok(filtered.contains(name));
    }
    if !installed(client, FILTERS)? {
        // Nothing is filtered before the release that made the table.
        return Ok(false);
    }
    let Some(row) = LOAD_FILTERED.run(client, &[])?.next() else {
        return Ok(false);
    };
    let filtered: HashSet<String> = row
        .get::<Vec<String>>(1)?
        .unwrap_or_default()
        .into_iter()
        .collect();
    WATCHED.set(watched_from(&row, 2)?);
    let filtered = Rc::new(filtered);
    keep(&FILTERED, generation, |kept| {
        *kept = Some(Rc::clone(&filtered))
    });
    Ok(filtered.contains(name))
}

/// The trigger lives apart from this module's `Result`, which its macro
/// would take for the standard one.
mod trigger {
    use pgrx::pg_sys;
    use pgrx::prelude::*;

    /// The registry changed (a statement trigger on `webhook.providers`,
    /// `webhook.provider_secrets` and `webhook.app_scopes`): every
    /// backend's cache of it is dropped once the change commits, and this
    /// backend's at once.
    #[pg_trigger]
    fn webhook_registry_changed<'a>(
        trigger: &'a pgrx::PgTrigger<'a>,
    ) -> std::result::Result<
        Option<pgrx::heap_tuple::PgHeapTuple<'a, pgrx::AllocatedByPostgres>>,
        pgrx::PgTriggerError,
    > {
        let relation = trigger.relation()?;
        // SAFETY: a relation the trigger fired on, open for this statement.
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relation.oid()) };
        Ok(None)
    }
}
