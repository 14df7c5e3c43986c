//! The ratio summary printed after the criterion groups: each engine's
//! throughput read back from criterion's own estimates
//! (`<criterion dir>/<group>/<engine>/new/estimates.json`, the time per
//! iteration), its ratio to naive and to idemkv, and the replay
//! latencies measured call by call.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// One criterion group as run: its name, the elements one iteration counts
/// (what `Throughput::Elements` was given) and the engines benched in it.
pub struct Group {
    pub name: &'static str,
    pub elements: u64,
    pub unit: &'static str,
    pub engines: Vec<&'static str>,
}

/// Per-call replay latencies of one engine.
pub struct Latency {
    pub engine: &'static str,
    pub calls: u64,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
}

/// Where criterion writes (the same rule as criterion's own default; the
/// bench hands it to criterion so the two cannot disagree).
pub fn criterion_directory() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        PathBuf::from(home)
    } else if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        PathBuf::from(target).join("criterion")
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("criterion")
    }
}

/// Nanoseconds per iteration that criterion saved for group/engine during
/// this run (a file older than `since` is an earlier run's): the slope of
/// time over iterations where criterion sampled linearly (the `time` it
/// prints), else (flat sampling) the mean of the samples' time per
/// iteration.
fn time_ns(dir: &Path, group: &str, engine: &str, since: SystemTime) -> Option<f64> {
    let path = dir.join(group).join(engine).join("new").join("estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let estimates: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    let slope = estimates["slope"]["point_estimate"].as_f64();
    slope.or_else(|| estimates["mean"]["point_estimate"].as_f64()).filter(|time| *time > 0.0)
}

#[allow(clippy::cast_precision_loss, reason = "element counts far below 2^52")]
fn per_second(elements: u64, time_ns: f64) -> f64 {
    elements as f64 * 1e9 / time_ns
}

/// 1234567.8 → "1,234,568".
fn grouped(value: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a rounded, positive rate")]
    let digits = (value.round().max(0.0) as u64).to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn ratio(ours: Option<f64>, theirs: Option<f64>) -> String {
    match (ours, theirs) {
        (Some(ours), Some(theirs)) => format!("{:.2}×", ours / theirs),
        _ => "—".to_owned(),
    }
}

/// Prints the summary; `quick` is criterion's test mode, where nothing is
/// measured.
pub fn print(dir: &Path, since: SystemTime, quick: bool, groups: &[Group], latencies: &[Latency]) {
    println!();
    println!("== summary");
    if quick {
        println!("no figures: criterion's test mode runs each bench once and measures nothing");
        return;
    }
    println!(
        "throughput = elements per iteration / criterion's time per iteration (the slope it prints as `time`; \
         the mean for open, sampled flat), from {}",
        dir.display()
    );
    println!(
        "{:<18} {:<8} {:>12} {:>16} {:>9} {:>9}",
        "group", "engine", "time/iter", "elements/s", "× naive", "× idemkv"
    );
    let mut missing = false;
    let rate = |group: &Group, engine: &str| {
        time_ns(dir, group.name, engine, since).map(|time| (time, per_second(group.elements, time)))
    };
    for group in groups {
        let naive = rate(group, "naive").map(|(_, rate)| rate);
        let idemkv = rate(group, "idemkv").map(|(_, rate)| rate);
        if group.engines.iter().all(|engine| rate(group, engine).is_none()) {
            missing = true;
            println!("{:<18} —", group.name);
            continue;
        }
        for (index, engine) in group.engines.iter().enumerate() {
            let label = if index == 0 { group.name } else { "" };
            let Some((time, ours)) = rate(group, engine) else {
                missing = true;
                println!("{label:<18} {engine:<8} {:>12} {:>16}", "—", "—");
                continue;
            };
            println!(
                "{label:<18} {engine:<8} {:>12} {:>16} {:>9} {:>9}",
                format!("{:.1?}", Duration::from_secs_f64(time / 1e9)),
                format!("{} {}", grouped(ours), group.unit),
                ratio(Some(ours), naive),
                ratio(Some(ours), idemkv),
            );
        }
    }
    if missing {
        println!("— = not measured in this run (filtered out, or criterion saved no estimates)");
    }
    let find = |name: &str| groups.iter().find(|group| group.name == name);
    for (what, one, two) in [("fresh", "fresh_buffered_1t", "fresh_buffered_2t"), ("replay", "replay_1t", "replay_2t")]
    {
        let (Some(one), Some(two)) = (find(one), find(two)) else { continue };
        if one.engines.iter().all(|engine| rate(one, engine).is_none() || rate(two, engine).is_none()) {
            continue;
        }
        let mut line = format!("2 threads / 1 thread, {what}:");
        for engine in &one.engines {
            let scaling = ratio(rate(two, engine).map(|(_, rate)| rate), rate(one, engine).map(|(_, rate)| rate));
            let _ = write!(line, " {engine} {scaling}");
        }
        println!("{line}");
    }
    for latency in latencies {
        println!(
            "replay, single calls (Instant around each, 1 thread, {} calls): {} p50 {:.2?} p99 {:.2?} p99.9 {:.2?}",
            latency.calls, latency.engine, latency.p50, latency.p99, latency.p999
        );
    }
}
