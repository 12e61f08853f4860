//! Which providers this ingress takes: those its role may receive for
//! (`webhook_receivable_providers()`), read at start and then every
//! `--providers-refresh` seconds by a task of its own, off the requests'
//! path; and at once (at most once a second) when a request names a
//! provider it does not know, so that a provider registered a moment ago
//! is served without a restart and a scan of made-up paths costs the
//! database one query a second.
//!
//! Only providers registered for the inbox are served: the ingress answers
//! as soon as the delivery is stored, which is right only where workers
//! process it afterwards. A claim-mode provider's deliveries are refused
//! (404, and why) rather than queued where no worker may look.

use crate::pool::{Pool, Unavailable};
use crate::{away, log};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

#[derive(Clone, Debug, PartialEq)]
pub struct Provider {
    pub scheme: String,
    pub inbox: bool,
}

/// What a route's provider is, for this request.
pub enum Route {
    Inbox,
    ClaimMode,
    Unknown,
    /// Not known, and the registry could not be read the last time it was
    /// tried: not a refusal to make, for the provider may well be
    /// registered (503, and the provider retries).
    Unreadable,
}

pub struct Providers {
    known: Mutex<Known>,
    refresh: Duration,
}

struct Known {
    providers: Arc<HashMap<String, Provider>>,
    /// When the last read was started (or tried).
    read_at: Option<Instant>,
    /// Whether the last read succeeded.
    read_ok: bool,
    /// When a read last succeeded, for the metrics.
    read_ok_at: Option<SystemTime>,
}

/// The least time between two reads of the registry.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The schemes that sign the URL the provider called.
pub const URL_SIGNED: &[&str] = &["twilio", "square", "hubspot"];

impl Providers {
    pub fn new(refresh: Duration) -> Self {
        Providers {
            known: Mutex::new(Known {
                providers: Arc::new(HashMap::new()),
                read_at: None,
                read_ok: false,
                read_ok_at: None,
            }),
            refresh,
        }
    }

    pub fn all(&self) -> Arc<HashMap<String, Provider>> {
        Arc::clone(&self.known.lock().expect("the providers' lock").providers)
    }

    /// Read the registry from `client`.
    pub async fn read(&self, client: &tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
        let read = client
            // Unnamed: the same through a transaction pooler.
            .query_typed(
                "SELECT provider, scheme, inbox FROM webhook_receivable_providers()",
                &[],
            )
            .await;
        let rows = match read {
            Ok(rows) => rows,
            Err(err) => {
                self.unread();
                return Err(err);
            }
        };
        let providers = rows
            .iter()
            .map(|row| {
                (
                    row.get::<_, String>(0),
                    Provider {
                        scheme: row.get(1),
                        inbox: row.get(2),
                    },
                )
            })
            .collect();
        let mut known = self.known.lock().expect("the providers' lock");
        known.providers = Arc::new(providers);
        known.read_at = Some(Instant::now());
        known.read_ok = true;
        known.read_ok_at = Some(SystemTime::now());
        Ok(())
    }

    /// Read the registry on a pooled connection, waiting for one no longer
    /// than the pool lets anyone wait; a failure is logged (and the
    /// providers already known are kept).
    pub async fn read_pooled(&self, pool: &Arc<Pool>) {
        let lent = match pool.get().await {
            Ok((lent, _)) => lent,
            Err(err) => {
                let error = match err {
                    // Busy says nothing of the database: what was read stands.
                    Unavailable::Busy(why) => why.to_string(),
                    Unavailable::Database(err) => {
                        self.unread();
                        away::message(&err)
                    }
                };
                log::event("warn", "registry_unread", json!({ "error": error }));
                return;
            }
        };
        if let Err(err) = self.read(&lent.conn().client).await {
            log::event(
                "warn",
                "registry_unread",
                json!({ "error": away::message(&err) }),
            );
            if away::is_away(&err) {
                lent.discard();
            }
        }
    }

    /// Read the registry every `--providers-refresh` seconds for as long
    /// as the process runs (the first read is the caller's, at start).
    pub async fn keep_fresh(&self, pool: &Arc<Pool>) {
        let first = tokio::time::Instant::now() + self.refresh;
        let mut tick = tokio::time::interval_at(first, self.refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.read_pooled(pool).await;
        }
    }

    /// How many providers are served (registered for the inbox), and when
    /// the registry was last read, for the metrics.
    pub fn served(&self) -> (usize, Option<SystemTime>) {
        let known = self.known.lock().expect("the providers' lock");
        (
            known.providers.values().filter(|p| p.inbox).count(),
            known.read_ok_at,
        )
    }

    /// A read could not be made (no connection, or the query failed).
    pub fn unread(&self) {
        self.known.lock().expect("the providers' lock").read_ok = false;
    }

    /// Whether a request that named a provider not known should read the
    /// registry now: the last read is over a second old. A yes marks the
    /// read as started, so that requests arriving meanwhile do not all
    /// start one.
    pub fn take_turn_to_read(&self) -> bool {
        let mut known = self.known.lock().expect("the providers' lock");
        let due = known.read_at.is_none_or(|at| at.elapsed() >= MIN_INTERVAL);
        if due {
            known.read_at = Some(Instant::now());
        }
        due
    }

    pub fn route(&self, name: &str) -> Route {
        let known = self.known.lock().expect("the providers' lock");
        match known.providers.get(name) {
            Some(p) if p.inbox => Route::Inbox,
            Some(_) => Route::ClaimMode,
            None if known.read_ok => Route::Unknown,
            None => Route::Unreadable,
        }
    }
}
