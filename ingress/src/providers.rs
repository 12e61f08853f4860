//! Which providers this ingress takes: those its role may receive for
//! (`webhook_receivable_providers()`), read at start and every
//! `--providers-refresh` seconds, and at once (at most once a second) when
//! a request names one it does not know, so that a provider registered a
//! moment ago is served without a restart and a scan of made-up paths
//! costs the database one query a second.
//!
//! Only providers registered for the inbox are served: the ingress answers
//! as soon as the delivery is stored, which is right only where workers
//! process it afterwards. A claim-mode provider's deliveries are refused
//! (404, and why) rather than queued where no worker may look.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    read_at: Option<Instant>,
    /// Whether the last read succeeded.
    read_ok: bool,
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
            .query(
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
        Ok(())
    }

    /// A read could not be made (no connection, or the query failed).
    pub fn unread(&self) {
        self.known.lock().expect("the providers' lock").read_ok = false;
    }

    /// Whether this caller should read the registry now: its refresh
    /// interval is over, or (`unknown`) a request named a provider not
    /// known and the last read is over a second old. A yes marks the read
    /// as started, so that requests arriving meanwhile do not all start one.
    pub fn take_turn_to_read(&self, unknown: bool) -> bool {
        let mut known = self.known.lock().expect("the providers' lock");
        let due = match known.read_at {
            None => true,
            Some(at) => at.elapsed() >= if unknown { MIN_INTERVAL } else { self.refresh },
        };
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
