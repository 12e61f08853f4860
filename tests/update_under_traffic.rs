//! An extension update under traffic: a database on the last published
//! release, handlers claiming deliveries, providers queueing into the
//! inbox and workers draining it, and `ALTER EXTENSION pg_webhook_inbox
//! UPDATE` run in the middle of it. Every request that failed is counted
//! by kind (each is a 5xx to its provider, which retries it); nothing
//! acknowledged is lost, nothing is done twice, nothing is left
//! unfinished, and the update lands.
//!
//! The server's library is this build's throughout: what changes is the
//! SQL the update script runs, under the traffic's locks (in production,
//! new sessions load the new library; sessions already open keep theirs
//! until they reconnect, which a pooler's server_lifetime bounds).
//!
//! Run by `make update-test`.

#![cfg(feature = "client-tests")]

mod common;

use common::traffic::{self, deliverer, worker, Tally};
use common::*;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DB: &str = "pgwi_update_traffic";

fn config(db: &str) -> postgres::Config {
    let mut c = base_config();
    c.dbname(db);
    c
}

#[test]
fn an_update_from_the_last_release_under_traffic_loses_nothing_and_does_nothing_twice() {
    let failed = update_under_traffic(&last_published());
    // The way from the last release replaces functions in place: no call
    // running one can lose it (a DROP FUNCTION would fail those calls).
    assert_eq!(
        failed, 0,
        "requests failed during the update: replace functions with CREATE OR REPLACE"
    );
}

/// The release before it too: its way to this version drops a column,
/// makes a function anew and resets circuit breakers, heavier DDL than
/// the last release's.
#[test]
fn an_update_from_the_release_before_under_traffic_loses_nothing_and_does_nothing_twice() {
    let releases = published_releases();
    let before = releases.iter().rev().nth(1).expect("two releases recorded");
    update_under_traffic(before);
}

/// The update from `published` under traffic; returns how many requests
/// failed during it (each retried).
fn update_under_traffic(published: &str) -> usize {
    let db = format!("{DB}_{}", published.replace('.', "_"));
    let mut admin = empty_database(&db);
    admin
        .batch_execute(&format!(
            "CREATE EXTENSION pg_webhook_inbox VERSION '{published}';
             SELECT webhook_register_provider('up_claims', scheme => 'stripe', secret => 'whsec_update');
             SELECT webhook_register_provider('up_inbox', scheme => 'stripe', secret => 'whsec_update',
                                              inbox => true);"
        ))
        .unwrap();
    admin.batch_execute(traffic::EFFECTS).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let stop_workers = Arc::new(AtomicBool::new(false));
    let mut deliverers = Vec::new();
    for t in 0..3 {
        deliverers.push(deliverer(
            config(&db),
            "up_claims",
            false,
            format!("c{t}_"),
            Arc::clone(&stop),
        ));
    }
    for t in 0..2 {
        deliverers.push(deliverer(
            config(&db),
            "up_inbox",
            true,
            format!("q{t}_"),
            Arc::clone(&stop),
        ));
    }
    let workers: Vec<_> = (0..3)
        .map(|_| worker(config(&db), "up_inbox", Arc::clone(&stop_workers)))
        .collect();
    std::thread::sleep(Duration::from_secs(2));

    let started = Instant::now();
    admin
        .batch_execute("ALTER EXTENSION pg_webhook_inbox UPDATE")
        .unwrap_or_else(|e| panic!("the update under traffic: {}", message(&e)));
    let took = started.elapsed();
    let version: String = admin
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "the update landed");

    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, SeqCst);
    let delivered = Tally::merge(deliverers.into_iter().map(|d| d.join().unwrap()));
    wait_for("the workers to drain the inbox", || {
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE status IN ('ready', 'leased')",
        ) == 0
    });
    stop_workers.store(true, SeqCst);
    let worked = Tally::merge(workers.into_iter().map(|w| w.join().unwrap()));
    let failed_deliveries = delivered.failures();
    let all = Tally::merge([delivered, worked]);
    let (lost, doubled, stuck) = traffic::outcome(&mut admin, &all.acknowledged);
    eprintln!(
        "update {published} -> {version} under traffic: took {took:?}; acknowledged {}; \
         failed deliveries {failed_deliveries}; failed requests by SQLSTATE {:?}; messages {:#?}; \
         lost {lost}, doubled {doubled}, stuck {stuck}",
        all.acknowledged.len(),
        all.failed,
        all.messages
    );
    assert!(all.acknowledged.len() > 100, "traffic ran");
    assert_eq!(lost, 0, "acknowledged and lost");
    assert_eq!(doubled, 0, "done twice");
    assert_eq!(stuck, 0, "left unfinished");
    all.failures()
}

/// The example receivers and workers themselves (Python, Node, Rust), each
/// its own process on its own pool of connections, through `ALTER
/// EXTENSION … UPDATE` from the last published release: providers deliver
/// over HTTP and redeliver what is not answered 2xx, the workers drain the
/// inbox and email through a stand-in of the email API. Nothing
/// acknowledged is lost or doubled, nothing is left in the inbox, no
/// delivery is answered anything but 2xx (a GitHub delivery refused is an
/// event lost). Run by `make examples-test`, which builds the examples.
#[test]
fn examples_through_an_update_from_the_last_release_lose_nothing_and_refuse_nothing() {
    use common::examples::{outcome, wait_drained, Delivered, Shop, APP_ROLE, SHOP};
    let published = last_published();
    let db = format!("{DB}_examples");
    let mut admin = empty_database(&db);
    admin
        .batch_execute(&format!(
            "CREATE EXTENSION pg_webhook_inbox VERSION '{published}'; {SHOP}"
        ))
        .unwrap();
    let (host, port) = {
        let c = base_config();
        let host = match &c.get_hosts()[0] {
            postgres::config::Host::Tcp(h) => h.clone(),
            other => panic!("a TCP host is needed for the examples, not {other:?}"),
        };
        (host, c.get_ports()[0])
    };
    let url = format!("postgresql://{APP_ROLE}@{host}:{port}/{db}");
    let mut shop = Shop::start(&["node", "python", "rust"], &url, "3 seconds");
    let stop = Arc::new(AtomicBool::new(false));
    let providers = shop.providers(&stop);
    std::thread::sleep(Duration::from_secs(3));

    let started = Instant::now();
    admin
        .batch_execute("ALTER EXTENSION pg_webhook_inbox UPDATE")
        .unwrap_or_else(|e| panic!("the update under the examples' traffic: {}", message(&e)));
    let took = started.elapsed();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, SeqCst);
    let delivered = Delivered::merge(providers.into_iter().map(|p| p.join().unwrap()));
    shop.assert_running();
    wait_drained(&mut admin, "the examples' workers to drain the inbox");
    let o = outcome(&mut admin, &delivered, &shop.email);
    let languages = count(&mut admin, "SELECT count(DISTINCT language) FROM orders");
    shop.stop();
    eprintln!(
        "examples through the update {published} -> {}: took {took:?}; {o:?}; answers other than 2xx {:?}",
        env!("CARGO_PKG_VERSION"),
        delivered.refused
    );
    assert_eq!(
        count(
            &mut admin,
            &format!(
                "SELECT count(*) FROM pg_extension WHERE extname = 'pg_webhook_inbox'
                    AND extversion = '{}'",
                env!("CARGO_PKG_VERSION")
            )
        ),
        1,
        "the update landed"
    );
    assert_eq!(languages, 6, "every receiver and worker did work");
    o.assert_clean();
    assert_eq!(
        delivered.refusals(),
        0,
        "deliveries refused during the update: {:?}",
        delivered.refused
    );
}
