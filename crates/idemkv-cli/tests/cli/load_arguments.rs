//! `idemkv load` run as a user would: the inputs that used to panic or abort
//! (after creating the store directory) are refused first, latencies under
//! `--durability sync` are those of an fsync (not clamped to a tiny bound),
//! and `--durability interval` runs its background fsyncs.

use crate::support::{assert_fails, idemkv, scratch, stderr, stdout};

#[test]
fn arguments_out_of_range_are_refused_before_anything_is_created() {
    let dir = scratch();
    let store = dir.path().join("store");
    let path = store.to_str().expect("utf-8");
    let cases: [&[&str]; 15] = [
        &["--duration", "nan"],
        &["--duration", "inf"],
        &["--duration", "1e30"],
        &["--duration", "1e19"],
        &["--duration=-1"],
        &["--duration", "0"],
        &["--keys", "18446744073709551615"],
        &["--keys", "1000000000000"],
        &["--keys", "0"],
        &["--threads", "100000"],
        &["--threads", "0"],
        &["--replay-ratio", "nan"],
        &["--value-bytes", "18446744073709551615"],
        &["--durability", "interval", "--interval-ms", "0"],
        &["--durability", "sync", "--interval-ms", "10"],
    ];
    for case in cases {
        let mut args = vec!["load", path];
        args.extend_from_slice(case);
        assert_fails(&idemkv(&args), 2, "--", &format!("{case:?}"));
        assert!(!store.exists(), "{case:?} created the store directory");
    }
}

/// The p50 of a load's summary, in nanoseconds.
fn p50_nanos(summary: &str) -> f64 {
    let line = summary.lines().find(|line| line.starts_with("claim latency: p50 ")).expect("a latency line");
    let mut words = line["claim latency: p50 ".len()..].split([' ', ',']);
    let value: f64 = words.next().and_then(|value| value.parse().ok()).expect("a number");
    let scale = match words.next() {
        Some("ns") => 1.0,
        Some("µs") => 1e3,
        Some("ms") => 1e6,
        Some("s") => 1e9,
        unit => panic!("unit {unit:?} in {line}"),
    };
    value * scale
}

#[test]
fn sync_latencies_are_those_of_an_fsync() {
    let dir = scratch();
    let path = dir.path().join("store");
    let path = path.to_str().expect("utf-8");
    // Every claim a new key: each waits for the fsync of its record.
    let args = ["--duration", "1", "--threads", "1", "--keys", "1000000", "--replay-ratio", "0"];
    let output = idemkv(&[&["load", path, "--durability", "sync"][..], &args].concat());
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    let p50 = p50_nanos(&text);
    // The old automatic histogram clamped everything to 2 ns; an fsync on a
    // real disk takes tens to hundreds of microseconds.
    assert!(p50 > 10_000.0, "p50 {p50} ns under --durability sync:\n{text}");
    assert!(text.contains("replay 0,"), "{text}");
}

#[test]
fn interval_durability_fsyncs_in_the_background() {
    let dir = scratch();
    for (name, extra) in [("default", &[][..]), ("every-20-ms", &["--interval-ms", "20"][..])] {
        let path = dir.path().join(name);
        let path = path.to_str().expect("utf-8");
        let args = [&["load", path, "--duration", "0.5", "--keys", "5000", "--durability", "interval"][..], extra];
        let output = idemkv(&args.concat());
        let text = stdout(&output);
        assert!(output.status.success(), "{name}: {text}{}", stderr(&output));
        let store_line = text.lines().find(|line| line.starts_with("store: ")).expect("a store line");
        let fsyncs: u64 = store_line
            .rsplit(", ")
            .next()
            .and_then(|part| part.strip_suffix(" fsyncs"))
            .and_then(|count| count.replace(',', "").parse().ok())
            .expect("an fsync count");
        assert!(fsyncs > 0, "{name}: no background fsync: {store_line}");
        assert!(text.contains("fencing check: no key was ever held twice"), "{text}");
    }
}
