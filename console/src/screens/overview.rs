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
    let stats = session
        .rows(
            "SELECT provider, events::text, processed::text, failed::text, dead::text, queued::text,
                    filtered::text, stale::text, last_event_at::text
               FROM webhook.provider_stats ORDER BY provider",
            &[],
        )
        .await.map_err(|refusal| page::refused("the provider statistics", refusal))?;
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
    body.raw("<p class=\"muted\">Charts: deliveries (blue) and failures or refusals (red), from \
              <code>webhook.metric_minutes</code> as <code>webhook_metrics_rollup()</code> last left it.</p>");

    let inbox = session
        .rows(
            "SELECT provider, consumer, ready::text, scheduled::text, leased::text, dead::text,
                    quarantined::text, date_trunc('second', oldest_ready_age)::text
               FROM webhook.inbox_stats ORDER BY provider, consumer",
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
    let dead = stats.iter().map(|r| number(&r[4])).sum::<i64>();
    body.raw("<p>").text(dead).raw(" dead letters: ");
    body.link("/dead", "see them");
    body.raw("</p>");
    Ok(page::page(
        "Overview",
        "/",
        fields.get("notice").map(String::as_str),
        body,
    ))
}
