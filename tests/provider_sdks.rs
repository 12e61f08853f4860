//! Deliveries signed by the providers' official SDKs (installed from npm
//! and PyPI at pinned versions by `.ci/sdk-fixtures`), or signed as the
//! provider documents it and accepted by its SDK's verifier, must pass
//! webhook_verify, and must fail once one byte of the body, of the URL or
//! of the signed timestamp is changed, or with a key that is not the
//! signer's.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;

fn verify(
    client: &mut Client,
    scheme: &str,
    headers: &str,
    body: &[u8],
    secret: &str,
    url: Option<&str>,
) -> (bool, String) {
    let row = client
        .query_one(
            "SELECT valid, reason FROM webhook_verify_detail($1, $2::text::jsonb, $3::bytea, ARRAY[$4::text], url => $5)",
            &[&scheme, &headers, &body, &secret, &url],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

#[test]
fn deliveries_signed_by_provider_sdks_verify_until_tampered() {
    let path = std::env::var("SDK_FIXTURES")
        .expect("SDK_FIXTURES names the file .ci/sdk-fixtures wrote (make test sets it)");
    let fixtures = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut client = connect(database("pgwi_provider_sdks"));
    let mut seen = std::collections::BTreeMap::<String, usize>::new();

    for line in fixtures.lines().filter(|l| !l.trim().is_empty()) {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        let (sdk, scheme) = (f["sdk"].as_str().unwrap(), f["scheme"].as_str().unwrap());
        let headers = f["headers"].to_string();
        let body = f["body"].as_str().unwrap().as_bytes().to_vec();
        let secret = f["secret"].as_str().unwrap();
        let url = f["url"].as_str();
        let ok = verify(&mut client, scheme, &headers, &body, secret, url);
        assert_eq!(ok, (true, "ok".into()), "{sdk}: {line}");

        let mut tampered = body.clone();
        let middle = tampered.len() / 2;
        tampered[middle] ^= 0x01;
        assert_eq!(
            verify(&mut client, scheme, &headers, &tampered, secret, url),
            (false, "bad_signature".into()),
            "{sdk}: body"
        );

        // Another key: a shared secret one character off, or a public key
        // or certificate that did not sign it.
        let other = match f["wrong_secret"].as_str() {
            Some(other) => other.to_string(),
            None => {
                let mut other: Vec<char> = secret.chars().collect();
                other[10] = if other[10] == 'A' { 'B' } else { 'A' };
                other.into_iter().collect()
            }
        };
        assert_eq!(
            verify(&mut client, scheme, &headers, &body, &other, url),
            (false, "bad_signature".into()),
            "{sdk}: secret"
        );

        if let Some(url) = url {
            let changed = url.replacen("hooks.", "hookz.", 1);
            assert_ne!(changed, url);
            assert_eq!(
                verify(&mut client, scheme, &headers, &body, secret, Some(&changed)),
                (false, "bad_signature".into()),
                "{sdk}: url"
            );
        }
        if let Some(shifted) = f.get("shifted_headers") {
            assert_eq!(
                verify(
                    &mut client,
                    scheme,
                    &shifted.to_string(),
                    &body,
                    secret,
                    url
                ),
                (false, "bad_signature".into()),
                "{sdk}: timestamp"
            );
        }
        if let Some(unknown) = f.get("unknown_key_headers") {
            assert_eq!(
                verify(
                    &mut client,
                    scheme,
                    &unknown.to_string(),
                    &body,
                    secret,
                    url
                ),
                (false, "unknown_certificate".into()),
                "{sdk}: certificate"
            );
        }

        if f["timestamped"].as_bool().unwrap() {
            let signed_at: i64 = client
                .query_one(
                    "SELECT extract(epoch FROM signed_at)::bigint
                       FROM webhook_verify_detail($1, $2::text::jsonb, $3::bytea, ARRAY[$4::text], url => $5)",
                    &[&scheme, &headers, &body, &secret, &url],
                )
                .unwrap()
                .get(0);
            let shifted = headers.replace(&signed_at.to_string(), &(signed_at + 1).to_string());
            assert_ne!(shifted, headers);
            assert_eq!(
                verify(&mut client, scheme, &shifted, &body, secret, url),
                (false, "bad_signature".into()),
                "{sdk}: timestamp"
            );
        }
        let scheme = scheme.split(';').next().unwrap();
        *seen.entry(format!("{scheme:<9} {sdk}")).or_default() += 1;
    }

    for (what, n) in &seen {
        eprintln!("{what}: {n} deliveries verified, and refused after tampering");
    }
    let schemes: std::collections::BTreeSet<&str> =
        seen.keys().map(|k| k.split(' ').next().unwrap()).collect();
    let every = [
        "discord", "github", "paddle", "paypal", "sendgrid", "slack", "standard", "stripe",
        "twilio",
    ];
    assert_eq!(
        schemes.into_iter().collect::<Vec<_>>(),
        every.into_iter().collect::<Vec<_>>()
    );
}

/// One row of docs/providers.md's table of deliberate differences.
struct Difference {
    case: String,
    judge: String,
    accepted_here: bool,
}

/// docs/providers.md's table: each case where the extension answers
/// otherwise than a provider's library, on purpose.
fn documented_differences() -> Vec<Difference> {
    let doc = include_str!("../docs/providers.md");
    let table = doc
        .split("<!-- differences:start -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- differences:end -->").next())
        .expect("docs/providers.md has a table between differences markers");
    table
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
            let accepted_here = match cells[2] {
                "accepted" => true,
                "refused" => false,
                other => panic!("docs/providers.md: \"{other}\" is neither accepted nor refused"),
            };
            Difference {
                case: cells[0]
                    .trim_start_matches("| ")
                    .trim_matches('`')
                    .to_string(),
                judge: cells[1].to_string(),
                accepted_here,
            }
        })
        .collect()
}

/// The providers' own verifiers judged every case first (tests/sdk/oracle.*,
/// run by .ci/sdk-fixtures); webhook_verify judges the same cases, its
/// window shifted back to when they were judged. Wherever it accepts what
/// a library refuses, or refuses what it accepts, the case must be in
/// docs/providers.md with the side it falls on, and every case there must
/// still differ.
#[test]
fn the_providers_libraries_judge_every_case_as_webhook_verify_does() {
    let path = std::env::var("SDK_ORACLE")
        .expect("SDK_ORACLE names the file .ci/sdk-fixtures wrote (make test sets it)");
    let cases = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut client = connect(database("pgwi_provider_oracles"));
    let documented = documented_differences();
    let now: i64 = client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::bigint", &[])
        .unwrap()
        .get(0);
    let mut undocumented = Vec::new();
    let mut observed = std::collections::BTreeSet::new();
    let mut judged = std::collections::BTreeMap::<String, usize>::new();
    for line in cases.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let (name, scheme, judge) = (
            case["case"].as_str().unwrap(),
            case["scheme"].as_str().unwrap(),
            case["judge"].as_str().unwrap(),
        );
        let secret = case["secret"].as_str().unwrap();
        // The answer as of when the library judged the case: the window
        // widened into the past by the time since, and a signature from
        // further ahead of then than the scheme's window refused as in
        // the future.
        let at = case["at"].as_i64().unwrap();
        let elapsed = (now - at).max(0);
        let row = client
            .query_one(
                "SELECT d.valid AND coalesce(extract(epoch FROM d.signed_at) <= $7::bigint
                                             + extract(epoch FROM s.tolerance), true),
                        CASE WHEN d.valid AND extract(epoch FROM d.signed_at) > $7::bigint
                                             + extract(epoch FROM s.tolerance)
                             THEN 'timestamp_in_future' ELSE d.reason END
                   FROM webhook_schemes() s,
                        webhook_verify_detail($1, $2::text::jsonb, convert_to($3, 'UTF8'), ARRAY[$4::text],
                            tolerance => coalesce(s.tolerance, interval '0') + make_interval(secs => $5::int), url => $6) d
                  WHERE s.scheme = $1",
                &[
                    &scheme,
                    &case["headers"].to_string(),
                    &case["body"].as_str().unwrap(),
                    &secret,
                    &(elapsed as i32),
                    &case["url"].as_str(),
                    &at,
                ],
            )
            .unwrap_or_else(|e| panic!("{name}: {}", message(&e)));
        let (ours, reason): (bool, String) = (row.get(0), row.get(1));
        let theirs = case["verdict"].as_bool().unwrap();
        *judged.entry(judge.to_string()).or_default() += 1;
        if ours == theirs {
            continue;
        }
        let short = judge.split(" (").next().unwrap().split(' ').next().unwrap();
        let listed = documented
            .iter()
            .any(|d| d.case == name && d.judge.starts_with(short) && d.accepted_here == ours);
        observed.insert((name.to_string(), short.to_string()));
        if !listed {
            undocumented.push(format!(
                "{name}: {judge} {} it, webhook_verify {} it ({reason})",
                if theirs { "accepts" } else { "refuses" },
                if ours { "accepts" } else { "refuses" },
            ));
        }
    }
    assert!(
        undocumented.is_empty(),
        "answers that differ from the provider's library and are not in docs/providers.md:\n{}",
        undocumented.join("\n")
    );
    let stale: Vec<String> = documented
        .iter()
        .filter(|d| {
            let short = d
                .judge
                .split(" (")
                .next()
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            !observed.contains(&(d.case.clone(), short.to_string()))
        })
        .map(|d| format!("{} ({})", d.case, d.judge))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/providers.md lists differences no case shows any more: {stale:?}"
    );
    for (judge, n) in &judged {
        eprintln!("{judge}: {n} cases judged alike or as documented");
    }
    assert!(judged.len() >= 10, "judges: {judged:?}");
}

/// Every payload of @octokit/webhooks-examples, signed as GitHub signs,
/// received through webhook_receive for a provider in inbox mode: each
/// queued once under its X-GitHub-Delivery with its X-GitHub-Event as the
/// type, its redelivery a duplicate.
#[test]
fn every_github_example_payload_is_queued_once() {
    let path = std::env::var("GITHUB_EXAMPLES")
        .expect("GITHUB_EXAMPLES names the file .ci/sdk-fixtures wrote (make test sets it)");
    let examples = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut client = connect(database("pgwi_github_examples"));
    let mut registered = false;
    let mut events = std::collections::BTreeSet::new();
    let mut count = 0;
    for line in examples.lines().filter(|l| !l.trim().is_empty()) {
        let example: serde_json::Value = serde_json::from_str(line).unwrap();
        if !registered {
            client
                .execute(
                    "SELECT webhook_register_provider('octokit', secret => $1, scheme => 'github', inbox => true)",
                    &[&example["secret"].as_str().unwrap()],
                )
                .unwrap();
            registered = true;
        }
        let (event, delivery) = (
            example["event"].as_str().unwrap(),
            example["delivery"].as_str().unwrap(),
        );
        let receive = |client: &mut Client| -> (String, i32, Option<String>, Option<String>) {
            let row = client
                .query_one(
                    "SELECT status, http_status, event_id, event_type
                       FROM webhook_receive('octokit', $1::text::jsonb, convert_to($2, 'UTF8'))",
                    &[
                        &example["headers"].to_string(),
                        &example["body"].as_str().unwrap(),
                    ],
                )
                .unwrap_or_else(|e| panic!("{event}: {}", message(&e)));
            (row.get(0), row.get(1), row.get(2), row.get(3))
        };
        assert_eq!(
            receive(&mut client),
            (
                "queued".to_string(),
                200,
                Some(delivery.to_string()),
                Some(event.to_string())
            ),
            "{event} {delivery}"
        );
        assert_eq!(receive(&mut client).0, "duplicate", "{event}: again");
        events.insert(event.to_string());
        count += 1;
    }
    let queued: i64 = client
        .query_one(
            "SELECT count(DISTINCT event_id) FROM webhook.inbox WHERE provider = 'octokit'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(queued, count as i64, "each example queued once");
    eprintln!(
        "github examples: {count} payloads of {} events queued once",
        events.len()
    );
    assert!(count >= 300 && events.len() >= 50);
}
