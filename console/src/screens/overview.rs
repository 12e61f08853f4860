//! Per provider and consumer: deliveries and failures over the last hour
//! and day (from the metrics rollup), events by status, the inbox's
//! backlog and its oldest ready age, dead letters, what is paused or
//! quarantined, and open alerts.

use super::{number, text, Fields};
use crate::charts::{self, Bar};
use crate::html::{cells, grid, url_encode, Html};
use crate::page;
use axum::extract::Query;
use axum::response::Response;
use std::collections::BTreeMap;

/// Deliveries and failures per provider in `buckets` intervals of
/// `seconds` up to now, oldest first: `webhook.metric_minutes`, which
/// `webhook_metrics_rollup()` fills (pg_cron runs it every minute).
const ACTIVITY: &str = "
    SELECT provider, (pg_catalog.floor(extract(epoch FROM now() - minute) / $1::text::int))::int::text,
           sum(count) FILTER (WHERE metric = 'deliveries')::text,
           sum(count) FILTER (WHERE metric = 'failures'
                                 OR (metric = 'deliveries' AND label = 'rejected'))::text
      FROM webhook.metric_minutes
     WHERE minute > now() - $1::text::int * $2::text::int * interval '1 second'
     GROUP BY 1, 2";

/// Providers a page of the overview lists.
const PROVIDERS_PER_PAGE: i64 = 25;

pub async fn show(state: crate::State, Query(fields): Query<Fields>) -> Result<Response, Response> {
    let app = state.0;
    let session = super::connect(&app).await?;
    let mut body = Html::new();

    // Activity charts, hour (12 × 5 min) and day (24 × 1 h).
    let mut charts_by_provider: BTreeMap<String, (Vec<Bar>, Vec<Bar>)> = BTreeMap::new();
    for (n, (seconds, buckets)) in [(300, 12usize), (3600, 24usize)].into_iter().enumerate() {
        let rows = session
            .rows(ACTIVITY, &[&seconds.to_string(), &buckets.to_string()])
            .await
            .map_err(|refusal| page::refused("the metrics", refusal))?;
        for row in rows {
            let entry = charts_by_provider
                .entry(text(&row, 0).to_string())
                .or_insert_with(|| (vec![Bar::default(); 12], vec![Bar::default(); 24]));
            let series = if n == 0 { &mut entry.0 } else { &mut entry.1 };
            let age = number(&row[1]) as usize;
            if age < buckets {
                let bar = &mut series[buckets - 1 - age];
                bar.deliveries += number(&row[2]);
                bar.failures += number(&row[3]);
            }
        }
    }
    // Registered providers first, then by their latest event: names an
    // application made up (webhook_claim takes any) come last, a page at
    // a time, and never push the providers that matter off the screen.
    let page_number = super::field(&fields, "page")
        .and_then(|p| p.parse::<i64>().ok())
        .filter(|p| *p >= 0 && *p < 100_000)
        .unwrap_or(0);
    let mut stats = session
        .rows(
            "SELECT s.provider, s.events::text, s.processed::text, s.failed::text, s.dead::text, s.queued::text,
                    s.filtered::text, s.stale::text, s.last_event_at::text
               FROM webhook.provider_stats s
              ORDER BY EXISTS (SELECT FROM webhook.provider_summary p WHERE p.name = s.provider) DESC,
                       s.last_event_at DESC NULLS LAST, s.provider
              LIMIT $1::text::bigint + 1 OFFSET $1::text::bigint * $2::text::bigint",
            &[&PROVIDERS_PER_PAGE.to_string(), &page_number.to_string()],
        )
        .await.map_err(|refusal| page::refused("the provider statistics", refusal))?;
    let more = stats.len() as i64 > PROVIDERS_PER_PAGE;
    stats.truncate(PROVIDERS_PER_PAGE as usize);
    body.raw("<h2>Providers</h2>");
    let mut rows = Vec::new();
    for row in &stats {
        let provider = text(row, 0);
        let (hour, day) = charts_by_provider
            .remove(provider)
            .unwrap_or_else(|| (vec![Bar::default(); 12], vec![Bar::default(); 24]));
        let mut name = Html::new();
        name.link(
            &format!("/deliveries?provider={}", url_encode(provider)),
            provider,
        );
        let mut r = vec![name];
        r.push(charts::bars(&format!("{provider}, last hour"), &hour));
        r.push(charts::bars(&format!("{provider}, last day"), &day));
        r.extend(cells(&row[1..=8]));
        rows.push(r);
    }
    body.table(
        &[
            "provider",
            "last hour",
            "last day",
            "events",
            "processed",
            "failed",
            "dead",
            "queued",
            "filtered",
            "stale",
            "last event",
        ],
        rows,
    );
    if more || page_number > 0 {
        body.raw("<p>");
        if page_number > 0 {
            body.link(&format!("/?page={}", page_number - 1), "newer");
            body.raw(" ");
        }
        if more {
            body.link(
                &format!("/?page={}", page_number + 1),
                "older, and unregistered names",
            );
        }
        body.raw("</p>");
    }
    body.raw("<p class=\"muted\">Charts: deliveries (blue) and failures or refusals (red), from \
              <code>webhook.metric_minutes</code> as <code>webhook_metrics_rollup()</code> last left it.</p>");

    let inbox = session
        .rows(
            "SELECT provider, consumer, ready::text, scheduled::text, leased::text, dead::text,
                    quarantined::text, date_trunc('second', oldest_ready_age)::text
               FROM webhook.inbox_stats
              ORDER BY EXISTS (SELECT FROM webhook.provider_summary p WHERE p.name = provider) DESC,
                       ready + dead DESC, provider, consumer
              LIMIT 50",
            &[],
        )
        .await
        .map_err(|refusal| page::refused("the inbox statistics", refusal))?;
    body.raw("<h2>Inbox</h2>");
    body.table(
        &[
            "provider",
            "consumer",
            "ready",
            "backing off",
            "leased",
            "dead",
            "quarantined",
            "oldest ready",
        ],
        grid(&inbox),
    );

    let paused = session
        .rows(
            "SELECT kind, nullif(provider, ''), nullif(consumer, ''), nullif(entity_key, ''),
                    waiting::text, paused_by, reason
               FROM webhook.paused ORDER BY paused_at DESC",
            &[],
        )
        .await
        .map_err(|refusal| page::refused("what is paused", refusal))?;
    body.raw("<h2>Paused and quarantined</h2>");
    body.table(
        &[
            "kind",
            "provider",
            "consumer",
            "entity",
            "held back",
            "by",
            "why",
        ],
        grid(&paused),
    );

    let alerts = session
        .rows(
            "SELECT id::text, rule, status::text, nullif(provider, ''), nullif(consumer, ''), message,
                    last_seen_at::text
               FROM webhook.alerts WHERE status <> 'resolved' ORDER BY id DESC LIMIT 50",
            &[],
        )
        .await.map_err(|refusal| page::refused("the alerts", refusal))?;
    body.raw("<h2>Open alerts</h2>");
    body.table(
        &[
            "id",
            "rule",
            "status",
            "provider",
            "consumer",
            "message",
            "last seen",
        ],
        grid(&alerts),
    );
    let dead = session
        .value("SELECT count(*)::text FROM webhook.dead_letters", &[])
        .await
        .map_err(|refusal| page::refused("the dead letters", refusal))?;
    body.raw("<p>")
        .text(dead.unwrap_or_default())
        .raw(" dead letters: ");
    body.link("/dead", "see them");
    body.raw("</p>");
    Ok(page::page(
        "Overview",
        "/",
        super::notice(&app, &fields),
        body,
    ))
}
