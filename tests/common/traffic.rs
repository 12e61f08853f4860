//! Steady traffic for tests that change the server under it (a failover,
//! an extension update): providers delivering into handlers that claim,
//! providers queueing into the inbox, and workers draining it, each
//! reconnecting and retrying as real ones do. Side effects go to a table
//! `effects (provider, event_id)` of the test's database, one row each
//! time one ran, so that twice shows as two rows.
#![allow(dead_code)]

use postgres::{Client, Config, NoTls};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const EFFECTS: &str = "CREATE TABLE effects (provider text NOT NULL, event_id text NOT NULL,
                                                 at timestamptz NOT NULL DEFAULT clock_timestamp())";

/// A connection to whichever server the configuration finds, waiting
/// through an outage as a driver's reconnect loop does; None once `stop`
/// is set and nothing answered for a minute.
pub fn reconnect(config: &Config, stop: &AtomicBool) -> Option<Client> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match config.connect(NoTls) {
            Ok(c) => return Some(c),
            Err(_) if stop.load(SeqCst) && Instant::now() > deadline => return None,
            Err(e) => {
                assert!(Instant::now() < deadline, "no server for 60 s: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// After a failed request: a connection the server dropped is made anew
/// (waiting through an outage). False once `stop` is set and no server
/// answers: the client gives up.
pub fn recover(client: &mut Client, config: &Config, stop: &AtomicBool) -> bool {
    if !client.is_closed() {
        return true;
    }
    match reconnect(config, stop) {
        Some(fresh) => {
            *client = fresh;
            true
        }
        None => false,
    }
}

/// What a client saw.
#[derive(Default, Debug)]
pub struct Tally {
    /// (provider, event id) of each delivery that got a committed answer:
    /// the provider saw a 2xx and will never send it again.
    pub acknowledged: Vec<(String, String)>,
    /// Requests that failed, by SQLSTATE ("connection" when the server
    /// went): each was retried, as a provider retries a 5xx.
    pub failed: BTreeMap<String, usize>,
    /// One message of each kind of failure, for the report.
    pub messages: BTreeMap<String, String>,
}

impl Tally {
    fn failed(&mut self, err: &postgres::Error) {
        let kind = super::sql_state(err).unwrap_or("connection").to_string();
        self.messages
            .entry(kind.clone())
            .or_insert_with(|| super::message(err));
        *self.failed.entry(kind).or_default() += 1;
    }

    pub fn failures(&self) -> usize {
        self.failed.values().sum()
    }

    pub fn merge(tallies: impl IntoIterator<Item = Tally>) -> Tally {
        let mut all = Tally::default();
        for t in tallies {
            all.acknowledged.extend(t.acknowledged);
            for (k, n) in t.failed {
                *all.failed.entry(k).or_default() += n;
            }
            for (k, m) in t.messages {
                all.messages.entry(k).or_insert(m);
            }
        }
        all
    }
}

/// A provider's delivery loop, events `{prefix}1`, `{prefix}2`, …: into a
/// handler that claims in its own transaction, writes its side effect and
/// commits, or (`inbox`) into the inbox. A delivery without an answer is
/// sent again until it gets one.
pub fn deliverer(
    config: Config,
    provider: &'static str,
    inbox: bool,
    prefix: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let mut tally = Tally::default();
        let mut client = reconnect(&config, &stop).unwrap();
        let mut n = 0;
        while !stop.load(SeqCst) {
            n += 1;
            let event_id = format!("{prefix}{n}");
            loop {
                let attempt = (|| -> Result<(), postgres::Error> {
                    let mut tx = client.transaction()?;
                    if inbox {
                        tx.query_one(
                            "SELECT status FROM webhook_enqueue($1, $2, 'invoice.paid',
                                                                jsonb_build_object('id', $2::text))",
                            &[&provider, &event_id],
                        )?;
                    } else {
                        let status: String = tx
                            .query_one(
                                "SELECT status FROM webhook_claim($1, $2, 'invoice.paid',
                                                                  jsonb_build_object('id', $2::text), 'sig',
                                                                  complete_on_commit => true)",
                                &[&provider, &event_id],
                            )?
                            .get(0);
                        if status == "claimed" || status == "retry" {
                            tx.execute(
                                "INSERT INTO effects (provider, event_id) VALUES ($1, $2)",
                                &[&provider, &event_id],
                            )?;
                        }
                    }
                    tx.commit()
                })();
                match attempt {
                    Ok(()) => {
                        tally
                            .acknowledged
                            .push((provider.to_string(), event_id.clone()));
                        break;
                    }
                    Err(e) => {
                        tally.failed(&e);
                        if !recover(&mut client, &config, &stop) {
                            return tally;
                        }
                    }
                }
            }
        }
        tally
    })
}

/// A worker of `provider`'s inbox: leases a few events (committed: the
/// lease outlives its transaction), works on them, then records each side
/// effect and completes it in one transaction. A lease whose worker lost
/// its server runs out and is taken again; its late completion is refused
/// and rolls back, nothing done.
pub fn worker(
    config: Config,
    provider: &'static str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Tally> {
    std::thread::spawn(move || {
        let mut tally = Tally::default();
        let mut client = reconnect(&config, &stop).unwrap();
        while !stop.load(SeqCst) {
            let round = (|| -> Result<usize, postgres::Error> {
                let leased = client.query(
                    "SELECT id::text, event_id FROM webhook_next(5, 'default', $1, lease => '2 seconds')",
                    &[&provider],
                )?;
                std::thread::sleep(Duration::from_millis(20));
                let mut tx = client.transaction()?;
                for row in &leased {
                    let (id, event_id): (String, String) = (row.get(0), row.get(1));
                    tx.execute(
                        "INSERT INTO effects (provider, event_id) VALUES ($1, $2)",
                        &[&provider, &event_id],
                    )?;
                    tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id])?;
                }
                tx.commit()?;
                Ok(leased.len())
            })();
            match round {
                Ok(0) => std::thread::sleep(Duration::from_millis(20)),
                Ok(_) => {}
                Err(e) => {
                    tally.failed(&e);
                    if !recover(&mut client, &config, &stop) {
                        return tally;
                    }
                }
            }
        }
        tally
    })
}

/// What the traffic left in the database: acknowledged deliveries without
/// their side effect (lost), events whose side effect ran more than once
/// (doubled), and inbox rows not processed (stuck).
pub fn outcome(c: &mut Client, acknowledged: &[(String, String)]) -> (usize, usize, i64) {
    let effects: BTreeMap<(String, String), i64> = c
        .query(
            "SELECT provider, event_id, count(*) FROM effects GROUP BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();
    let lost = acknowledged
        .iter()
        .filter(|k| !effects.contains_key(*k))
        .count();
    let doubled = effects.values().filter(|&&n| n > 1).count();
    (lost, doubled, unprocessed(c))
}

/// Inbox rows not processed: after the workers drained, stuck ones.
pub fn unprocessed(c: &mut Client) -> i64 {
    c.query_one(
        "SELECT count(*) FROM webhook.inbox WHERE status <> 'processed'",
        &[],
    )
    .unwrap()
    .get(0)
}
