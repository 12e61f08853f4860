//! Where each queue's ready rows start, as this backend last found them.
//!
//! A lease moves its row to the end of its queue's index range
//! (`inbox_pending_idx`: its `run_at` becomes the lease's end), and the
//! row's old entry stays behind at the head, dead, until a `VACUUM`
//! removes it. In a big inbox that is rarely: `VACUUM` leaves a table's
//! indexes alone while under 2 % of its pages hold dead rows ("index scan
//! bypassed"), and an inbox that keeps its processed rows is big. A pick
//! that started at the head of its range would walk every entry leased
//! since: on a queue drained faster than it is vacuumed, thousands of
//! index pages per call, growing with every event drained.
//!
//! So each backend remembers, per queue (per call filter: consumer,
//! provider or none, event type or none; per provider the call read), the
//! `run_at` of the oldest row its last full pick took, and its next pick
//! of that queue starts there. Everything before that point
//! was leased, or locked by another worker's pick at the time. What can
//! still appear there later is a row that another worker picked and then
//! rolled back, or one whose queueing transaction committed after rows
//! queued later than it: those are found by a pick from the start of the
//! range, which runs
//!
//! * at once, when a pick from the remembered point finds nothing;
//! * on the next call, when it finds fewer rows than asked (the queue's
//!   ready rows have run out: the next pick is cheap, and must not answer
//!   "none" past a straggler);
//! * after `FROM_START_EVERY` calls from the heads, whatever they found,
//!   and in every new backend.
//!
//! Without a provider filter, a call whose filter has heads reads only
//! the providers they name: finding the others means probing the head of
//! each provider's range, the walk this module exists to avoid. A
//! provider that starts queueing is found by the next call from the start
//! (within `FROM_START_EVERY` calls, or after the next short batch), and
//! takes its turns from then on.
//!
//! A provider with `fifo` is always read from the start (in SQL, see
//! `pick::lease!`): an event that is not its line's head is passed over
//! without being leased, and must be found when its turn comes.

use pgrx::datum::TimestampWithTimeZone;
use std::cell::RefCell;
use std::collections::HashMap;

/// After this many calls with one filter from its heads, a backend's next
/// call reads from the start of each range, so that a straggler before a
/// head waits for at most this many calls of each worker.
const FROM_START_EVERY: u32 = 64;

/// How many call filters a backend remembers heads for before it forgets
/// them all: a bound on memory, whatever callers pass.
const MAX_FILTERS: usize = 256;

/// A call's filter: the consumer, the provider and the event type (`None`:
/// any).
type Filter = (String, Option<String>, Option<String>);

/// What a backend knows of the queues one filter reads.
#[derive(Default)]
struct Queues {
    /// Calls made from these heads.
    calls: u32,
    /// Per provider: where its ready rows started.
    heads: HashMap<String, TimestampWithTimeZone>,
}

thread_local! {
    static HEADS: RefCell<HashMap<Filter, Queues>> = RefCell::new(HashMap::new());
}

fn filter(consumer: &str, provider: Option<&str>, event_type: Option<&str>) -> Filter {
    (
        consumer.to_owned(),
        provider.map(str::to_owned),
        event_type.map(str::to_owned),
    )
}

/// Where a call with this filter may start reading each provider's
/// queue, as LEASE's `$11` (providers) and `$12` (their starting points);
/// a provider not listed is read from the start, and none is when the
/// heads have served `FROM_START_EVERY` calls.
pub(super) fn starts(
    consumer: &str,
    provider: Option<&str>,
    event_type: Option<&str>,
) -> (Vec<String>, Vec<TimestampWithTimeZone>) {
    HEADS.with_borrow_mut(|heads| {
        let key = filter(consumer, provider, event_type);
        let Some(queues) = heads.get_mut(&key) else {
            return Default::default();
        };
        if queues.calls >= FROM_START_EVERY {
            heads.remove(&key);
            return Default::default();
        }
        queues.calls += 1;
        queues
            .heads
            .iter()
            .map(|(p, since)| (p.clone(), *since))
            .unzip()
    })
}

/// What a pick found: each picked row's provider and `run_at` before the
/// pick (stale and dead verdicts included). A full batch moves each
/// provider's head to the oldest row picked from it; a short one means
/// the queues read have no more ready rows after their heads, and they
/// are read from the start next time.
pub(super) fn record(
    consumer: &str,
    provider: Option<&str>,
    event_type: Option<&str>,
    picked: &[(String, TimestampWithTimeZone)],
    full: bool,
) {
    HEADS.with_borrow_mut(|heads| {
        let key = filter(consumer, provider, event_type);
        if !full {
            heads.remove(&key);
            return;
        }
        if heads.len() >= MAX_FILTERS && !heads.contains_key(&key) {
            heads.clear();
        }
        let queues = heads.entry(key).or_default();
        let mut oldest: HashMap<&str, TimestampWithTimeZone> = HashMap::new();
        for (p, due) in picked {
            oldest
                .entry(p.as_str())
                .and_modify(|t| *t = (*t).min(*due))
                .or_insert(*due);
        }
        for (p, due) in oldest {
            queues.heads.insert(p.to_owned(), due);
        }
    });
}
