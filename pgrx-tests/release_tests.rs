//! The release's own files agree with each other: the version in
//! Cargo.toml, META.json and CHANGELOG.md, and an upgrade path in `sql/`
//! from every kept release to the current one. Plain tests, no server.

use std::collections::{BTreeSet, HashMap};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn sql_files() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql");
    std::fs::read_dir(dir)
        .expect("sql/ exists")
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("pg_webhook_inbox--") && name.ends_with(".sql"))
        .collect()
}

#[test]
fn meta_json_and_changelog_name_the_current_version() {
    let meta: serde_json::Value =
        serde_json::from_str(include_str!("../META.json")).expect("META.json is JSON");
    assert_eq!(meta["version"], VERSION);
    assert_eq!(meta["provides"]["pg_webhook_inbox"]["version"], VERSION);
    let changelog = include_str!("../CHANGELOG.md");
    assert!(
        changelog.contains(&format!("\n## {VERSION}\n")),
        "CHANGELOG.md has a section for {VERSION}"
    );
}

/// Every kept install script (`pg_webhook_inbox--X.sql`) reaches the
/// current version through upgrade scripts (`--A--B.sql`), and no upgrade
/// script starts from a version nobody could have installed.
#[test]
fn every_kept_release_has_an_upgrade_path_to_the_current_one() {
    let files = sql_files();
    let mut releases = BTreeSet::new();
    let mut steps: HashMap<String, Vec<String>> = HashMap::new();
    for name in &files {
        let versions: Vec<&str> = name
            .trim_start_matches("pg_webhook_inbox--")
            .trim_end_matches(".sql")
            .split("--")
            .collect();
        match versions.as_slice() {
            [release] => {
                releases.insert(release.to_string());
            }
            [from, to] => steps
                .entry(from.to_string())
                .or_default()
                .push(to.to_string()),
            _ => panic!("unexpected script name {name}"),
        }
    }
    assert!(
        !releases.contains(VERSION),
        "the current version's install script is generated, not kept"
    );
    for release in &releases {
        let mut at = release.clone();
        let mut hops = 0;
        while at != VERSION {
            let next = steps.get(&at).and_then(|to| to.first()).unwrap_or_else(|| {
                panic!("no upgrade script from {at} (on the way from {release})")
            });
            at = next.clone();
            hops += 1;
            assert!(hops < 100, "upgrade scripts loop");
        }
    }
    for from in steps.keys() {
        assert!(
            releases.contains(from) || steps.values().flatten().any(|to| to == from),
            "upgrade script from {from}, which no release or upgrade produces"
        );
    }
}
