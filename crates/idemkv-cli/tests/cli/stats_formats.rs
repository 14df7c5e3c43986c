//! `idemkv stats` reports what is on disk in a form its readers can use:
//! the Prometheus output parses, with a `# TYPE` for every metric and no
//! counter typed as a gauge; a torn tail is reported and left in place;
//! JSON carries the same facts; times are RFC 3339.

use crate::support::{idemkv, loaded_store, scratch, stderr, stdout};
use std::collections::BTreeMap;

/// Parses the text exposition format: every sample's value by series, and
/// every metric family's declared type and unit. Panics on a line that is
/// not well formed.
fn parse(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, String>, BTreeMap<String, String>) {
    let (mut samples, mut types, mut units) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "{text}");
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let (keyword, name, rest) = (words.next(), words.next(), words.next());
            let (Some(keyword), Some(name), Some(rest)) = (keyword, name, rest) else {
                panic!("bad comment line {line:?}");
            };
            match keyword {
                "TYPE" => assert!(types.insert(name.to_string(), rest.to_string()).is_none(), "two TYPEs: {line}"),
                "UNIT" => assert!(units.insert(name.to_string(), rest.to_string()).is_none(), "two UNITs: {line}"),
                "HELP" => {}
                other => panic!("unknown keyword {other} in {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad sample line {line:?}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let family = series.split('{').next().expect("a name");
        assert!(types.contains_key(family), "{family} has no # TYPE before its sample");
        assert!(samples.insert(series.to_string(), value).is_none(), "two samples of {series}");
    }
    (samples, types, units)
}

#[test]
fn prometheus_output_parses_with_gauges_and_units() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 300);
    let path = store.to_str().expect("utf-8");
    let output = idemkv(&["stats", path, "--format", "prometheus"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let (samples, types, units) = parse(&text);
    for (name, kind) in &types {
        assert!(name.starts_with("idemkv_"), "{name}");
        // Levels read off the files: gauges. A `_total` name is a counter's.
        assert_eq!(kind, "gauge", "{name}");
        assert!(!name.ends_with("_total"), "a counter typed as a gauge: {name}");
    }
    for (name, unit) in &units {
        assert!(name.ends_with(&format!("_{unit}")), "{name} has unit {unit}");
    }
    assert_eq!(units.get("idemkv_disk_bytes").map(String::as_str), Some("bytes"));
    assert_eq!(units.get("idemkv_oldest_record_age_seconds").map(String::as_str), Some("seconds"));
    assert_eq!(samples.get("idemkv_shards"), Some(&4.0));
    assert_eq!(samples.get("idemkv_records{state=\"completed\"}"), Some(&300.0));
    assert_eq!(samples.get("idemkv_records{state=\"processing\"}"), Some(&0.0));
    assert!(samples.get("idemkv_disk_bytes").is_some_and(|bytes| *bytes > samples["idemkv_live_bytes"]));
    assert!(samples.get("idemkv_oldest_record_age_seconds").is_some_and(|age| (0.0..600.0).contains(age)));
    assert_eq!(samples.get("idemkv_torn_tail_bytes"), Some(&0.0));
}

#[test]
fn a_torn_tail_is_reported_in_every_format_and_left_in_place() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 300);
    let path = store.to_str().expect("utf-8");
    let mut segments: Vec<_> = std::fs::read_dir(store.join("shard-0000"))
        .expect("ls")
        .map(|entry| entry.expect("entry").path())
        .filter(|file| file.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    segments.sort();
    let active = segments.pop().expect("a segment");
    let len = std::fs::metadata(&active).expect("stat").len();
    // Zeros after the last record are space the writer filled ahead and
    // never wrote (a store killed mid-run ends so): not a torn tail.
    let file = std::fs::OpenOptions::new().write(true).open(&active).expect("open");
    file.set_len(len + 4096).expect("extend");
    assert!(stdout(&idemkv(&["stats", path])).contains("torn tail  none"));
    // A crash in the middle of a record's write: bytes that are not a record.
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xA5; 100], len + 1000).expect("write");

    let text = stdout(&idemkv(&["stats", path]));
    assert!(text.contains("torn tail  4.0 KiB (4096 bytes) after the last whole record, left in place"), "{text}");
    let json = stdout(&idemkv(&["stats", path, "--format", "json"]));
    assert!(json.contains("\"torn_tail_bytes\":4096"), "{json}");
    let (samples, _, _) = parse(&stdout(&idemkv(&["stats", path, "--format", "prometheus"])));
    assert_eq!(samples.get("idemkv_torn_tail_bytes"), Some(&4096.0));
    assert_eq!(std::fs::metadata(&active).expect("stat").len(), len + 4096, "a read-only command cut the tail");
    // The next writable open cuts it.
    assert!(idemkv(&["compact", path]).status.success());
    assert_eq!(std::fs::metadata(&active).expect("stat").len(), len);
    assert!(stdout(&idemkv(&["stats", path])).contains("torn tail  none"));
}

#[test]
fn json_and_text_carry_rfc_3339_times() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 10);
    let path = store.to_str().expect("utf-8");
    let json = stdout(&idemkv(&["stats", path, "--format", "json"]));
    let created = json.split("\"oldest_record_created\":\"").nth(1).and_then(|rest| rest.split('"').next());
    let created = created.expect("an oldest record time");
    assert!(humantime::parse_rfc3339(created).is_ok(), "{created}");
    let listed = stdout(&idemkv(&["list", path]));
    for line in listed.lines() {
        let created = line.split(" created=").nth(1).and_then(|rest| rest.split(' ').next()).expect("created=");
        assert!(humantime::parse_rfc3339(created).is_ok(), "{line}");
    }
}
