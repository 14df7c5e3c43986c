//! The `idemkv` binary, run as a user would: every subcommand on a loaded
//! store, a damaged segment, bad arguments, and a directory held by a live
//! store.

use crate::support::{assert_fails, idemkv, loaded_store, scratch, stderr, stdout};
use std::path::Path;

#[test]
fn stats_after_a_load_shows_what_is_on_disk_in_three_formats() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    let output = idemkv(&["stats", path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    // The records the load left, not the counters of the stats process.
    assert!(text.contains("records    500 live: 0 processing, 500 completed, 0 failed"), "{text}");
    assert!(text.contains("shards     4\n"), "{text}");
    assert!(text.contains(" bytes) in segment files"), "{text}");
    assert!(text.contains("oldest     created 20"), "{text}");
    assert!(text.contains("torn tail  none"), "{text}");
    assert!(text.contains("kept by the process that has the store open"), "{text}");
    let json = stdout(&idemkv(&["stats", path, "--format", "json"]));
    assert!(json.trim().starts_with('{') && json.trim().ends_with('}'), "{json}");
    assert!(json.contains("\"records_completed\":500") && json.contains("\"shards\":4"), "{json}");
    let prometheus = stdout(&idemkv(&["stats", path, "--format", "prometheus"]));
    assert!(prometheus.contains("# TYPE idemkv_shards gauge\nidemkv_shards 4\n"), "{prometheus}");
    assert!(prometheus.contains("idemkv_records{state=\"completed\"} 500\n"), "{prometheus}");
}

#[test]
fn get_and_list_show_records_with_rfc_3339_times() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    let output = idemkv(&["get", path, "load-0000000000000007"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("state     Completed\n"), "{text}");
    assert!(text.contains(&format!("response  {} (text, 64 B)", "v".repeat(64))), "{text}");
    let expires = text.lines().find(|line| line.starts_with("expires ")).expect("an expiry line");
    assert!(expires.contains("Z (in 23h 59m"), "{expires}");
    let missing = idemkv(&["get", path, "no-such-key", "--scope", "nobody"]);
    assert_fails(&missing, 1, "no live record", "get of an absent key");
    let listed = stdout(&idemkv(&["list", path, "--state", "completed", "--limit", "7"]));
    assert_eq!(listed.lines().count(), 7, "{listed}");
    for line in listed.lines() {
        assert!(line.contains("state=Completed") && line.contains(" expires=20"), "{line}");
        assert!(!line.contains("_ms="), "epoch milliseconds: {line}");
    }
    let none = stdout(&idemkv(&["list", path, "--state", "processing"]));
    assert_eq!(none.lines().count(), 0, "{none}");
}

#[test]
fn verify_and_compact_a_clean_store() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    let output = idemkv(&["verify", path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("1,000 records") && text.contains("clean"), "{text}");
    let output = idemkv(&["compact", path]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("segments dropped 0"), "{}", stdout(&output));
}

#[test]
fn verify_reports_a_damaged_segment_with_file_and_offset() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    let segment = Path::new(path).join("shard-0000/0000000001.seg");
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[64 + 20] ^= 0xFF; // inside the first record (after the 64-byte header)
    std::fs::write(&segment, bytes).expect("write");
    let output = idemkv(&["verify", path]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(text.contains(&format!("DAMAGE: {} offset 64", segment.display())), "{text}");
    // The read-only commands refuse it as damage too, once they replay that
    // segment: an open does not read the frames a hint file covers (verify
    // is the check for those).
    assert!(idemkv(&["stats", path]).status.success(), "the hint covers the damage");
    let hint = segment.with_extension("hint");
    std::fs::remove_file(&hint).expect("the sealed segment has a hint");
    assert_fails(&idemkv(&["stats", path]), 1, "corruption in", "stats of a damaged store");
}

#[test]
fn bad_arguments_and_foreign_directories_fail_cleanly() {
    let bad = idemkv(&["load"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("Usage"), "{}", stderr(&bad));
    let dir = scratch();
    let fresh = dir.path().join("fresh");
    let fresh = fresh.to_str().expect("utf-8");
    assert_fails(&idemkv(&["load", fresh, "--replay-ratio", "3"]), 2, "--replay-ratio", "a ratio of 3");
    for case in [&["frobnicate"][..], &["stats", fresh, "--format", "xml"], &["list", fresh, "--limit", "-1"]] {
        let output = idemkv(case);
        assert_eq!(output.status.code(), Some(2), "{case:?}");
        assert!(stderr(&output).starts_with("error: "), "{case:?}: {}", stderr(&output));
    }
    assert!(!Path::new(fresh).exists(), "a refused command created the directory");

    let foreign = scratch();
    std::fs::write(foreign.path().join("notes.txt"), b"mine").expect("write");
    let path = foreign.path().to_str().expect("utf-8");
    for command in ["stats", "list", "verify", "compact", "repair"] {
        assert_fails(&idemkv(&[command, path]), 2, "is not an idemkv store (it has no MANIFEST)", command);
    }
    assert_fails(&idemkv(&["get", path, "key"]), 2, "is not an idemkv store", "get");
    assert_eq!(std::fs::read_dir(foreign.path()).expect("ls").count(), 1, "a file was created");
}

#[test]
fn a_directory_held_by_a_live_store_names_the_holder() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    let writer = idemkv::Store::open(path, idemkv::Config::new()).expect("open");
    let pid = std::process::id();
    for args in [&["stats", path][..], &["get", path, "k"], &["list", path], &["compact", path], &["repair", path]] {
        assert_fails(&idemkv(args), 2, &format!("is locked by another open store (process {pid})"), args[0]);
    }
    // verify reads without the lock.
    assert!(idemkv(&["verify", path]).status.success());
    drop(writer);

    // A read-only handle keeps writers out, and lets readers in.
    let reader = idemkv::Store::open_read_only(path, idemkv::Config::new()).expect("read-only open");
    assert!(idemkv(&["stats", path]).status.success());
    assert!(idemkv(&["list", path, "--limit", "1"]).status.success());
    for args in [&["compact", path][..], &["repair", path], &["load", path, "--duration", "0.1"]] {
        assert_fails(&idemkv(args), 2, "is locked by another open store (no process id recorded", args[0]);
    }
    drop(reader);
    assert!(idemkv(&["compact", path]).status.success());
}

#[test]
fn every_argument_of_every_command_has_help_text() {
    for command in ["stats", "get", "list", "verify", "compact", "repair", "load", "migrate"] {
        let output = idemkv(&[command, "-h"]);
        assert!(output.status.success(), "{command}");
        let help = stdout(&output);
        let arguments: Vec<&str> =
            help.lines().filter(|line| line.starts_with("  <") || line.trim_start().starts_with('-')).collect();
        assert!(arguments.len() >= 2, "{command}: {help}");
        for line in arguments {
            let parts: Vec<&str> = line.trim().split("  ").filter(|part| !part.trim().is_empty()).collect();
            assert!(parts.len() >= 2 && parts[1].trim().len() > 5, "{command}: no help text in {line:?}");
        }
    }
}

#[test]
fn processing_shows_its_lease_end_and_failed_its_expiry() {
    use idemkv::{Claim, ClaimRequest, Config, Fingerprint, Store};
    let dir = scratch();
    let store = Store::open(dir.path(), Config::new()).expect("open");
    let claim = |key: &'static str| match store.claim(&ClaimRequest::new(key, Fingerprint::of(key.as_bytes()))) {
        Ok(Claim::Acquired(lease)) => lease,
        other => panic!("{other:?}"),
    };
    let _held = claim("in-flight").into_token();
    let mut charged = claim("charged");
    charged.checkpoint("charged", b"ch_9").expect("checkpoint");
    let _charged = charged.into_token();
    claim("declined").fail(&[0xff, 0x00]).expect("fail");
    store.close().expect("close");
    let path = dir.path().to_str().expect("utf-8");

    let processing = stdout(&idemkv(&["get", path, "in-flight"]));
    let lease_end = processing.lines().find(|line| line.starts_with("lease end ")).expect("a lease end");
    // The default lease is 30 s.
    assert!(lease_end.contains("Z (in 2") || lease_end.ends_with("Z (in 30s)"), "{lease_end}");
    assert!(!processing.contains("expires"), "{processing}");
    assert!(processing.contains("recovery  none\n"), "{processing}");
    let resumable = stdout(&idemkv(&["get", path, "charged"]));
    assert!(resumable.contains(r#"recovery  step "charged", payload ch_9 (4 B)"#), "{resumable}");
    let failed = stdout(&idemkv(&["get", path, "declined"]));
    assert!(failed.contains("state     Failed\n") && failed.contains("expires   20"), "{failed}");
    assert!(failed.contains("response  0xff00 (hex, 2 B)"), "{failed}");
    let listed = stdout(&idemkv(&["list", path]));
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert_eq!(listed.matches(r#" recovery_step="charged""#).count(), 1, "{listed}");
    for line in listed.lines() {
        let expected = if line.contains("state=Processing") { " lease_end=20" } else { " expires=20" };
        assert!(line.contains(expected), "{line}");
    }
}

/// Cuts the active segment of shard 0 of `store` inside a record.
fn truncate_active_segment(store: &Path) -> u64 {
    let segment = store.join("shard-0000/0000000001.seg");
    let len = std::fs::metadata(&segment).expect("stat").len();
    let cut = len * 2 / 3 + 7;
    std::fs::OpenOptions::new().write(true).open(&segment).expect("open").set_len(cut).expect("truncate");
    cut
}

#[test]
fn one_repair_fixes_a_truncated_active_segment() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    truncate_active_segment(&store);
    assert_eq!(idemkv(&["verify", path]).status.code(), Some(1), "the cut is damage: durable records are gone");
    let output = idemkv(&["repair", path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(!text.contains("nothing to repair"), "{text}");
    assert!(text.contains("ends before its durable mark"), "{text}");
    // Every record the cut took is listed, by the segment's hint.
    let dropped = text.lines().filter(|line| line.starts_with("dropped: ")).count();
    assert!(dropped > 0, "{text}");
    assert!(text.contains(&format!("records dropped: {dropped} ")), "{text}");
    let verified = idemkv(&["verify", path]);
    assert!(verified.status.success() && stdout(&verified).contains("clean"), "{}", stdout(&verified));
    for args in [&["stats", path][..], &["list", path], &["get", path, "load-0000000000000007"], &["compact", path]] {
        let output = idemkv(args);
        assert!(output.status.code().is_some_and(|code| code < 2), "{args:?}: {}", stderr(&output));
        assert!(!stderr(&output).contains("corruption"), "{args:?}: {}", stderr(&output));
    }
    let again = stdout(&idemkv(&["repair", path]));
    assert_eq!(again.trim(), "clean: nothing to repair", "{again}");
}

/// A kind of damage: what it is, how it is done, what repair would do.
type Case = (&'static str, fn(&Path), &'static str);

#[test]
fn every_corruption_message_names_repair_and_what_it_would_do() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 500);
    let path = store.to_str().expect("utf-8");
    let repair_named = format!("`idemkv repair {path}` would ");
    let damages: [Case; 4] = [
        ("a damaged record", damage_a_record, "rewrite it with every whole record it holds"),
        ("a damaged segment header", damage_a_segment_header, "rewrite it with every whole record it holds"),
        ("a missing segment", delete_a_segment, "put an empty segment in its place"),
        ("a damaged catalog", damage_a_catalog, "rebuild the catalog from the segments present"),
    ];
    for (what, damage, remedy) in damages {
        damage(&store);
        let opened = idemkv(&["stats", path]);
        assert_fails(&opened, 1, &format!("{repair_named}{remedy}"), what);
        let verified = stdout(&idemkv(&["verify", path]));
        let advice = verified.lines().find(|line| line.trim_start().starts_with("idemkv repair would "));
        assert!(advice.is_some(), "{what}: verify does not say what repair would do: {verified}");
        let repaired = idemkv(&["repair", path]);
        assert!(repaired.status.success(), "{what}: {}", stderr(&repaired));
        assert!(idemkv(&["verify", path]).status.success(), "{what}: not clean after repair");
    }
}

fn damage_a_record(store: &Path) {
    let segment = store.join("shard-0000/0000000001.seg");
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[64 + 20] ^= 0xFF;
    std::fs::write(&segment, bytes).expect("write");
    // Open does not read what a hint covers.
    std::fs::remove_file(segment.with_extension("hint")).expect("the segment has a hint");
}

fn damage_a_segment_header(store: &Path) {
    let segment = store.join("shard-0001/0000000001.seg");
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[2] ^= 0xFF;
    std::fs::write(&segment, bytes).expect("write");
}

fn delete_a_segment(store: &Path) {
    std::fs::remove_file(store.join("shard-0002/0000000001.seg")).expect("remove");
}

fn damage_a_catalog(store: &Path) {
    let catalog = store.join("shard-0003/CATALOG");
    let mut bytes = std::fs::read(&catalog).expect("read");
    bytes[17] ^= 0xFF;
    std::fs::write(&catalog, bytes).expect("write");
}
