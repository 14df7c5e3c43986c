//! What a claim's clock readings cost: `SystemClock::now_ms` (the wall
//! clock TTLs count in) beside `SystemTime::now` read as ms, and the
//! claims' latency clock (`quanta::Instant`, feature `metrics`) beside
//! `Instant::now` and beside the time-stamp counter it scales (a raw
//! `quanta::Clock` reading, turned into nanoseconds); how long
//! `quanta`'s first reading in a process takes (its calibration, which a
//! store does at open); and the steps `SystemClock`'s wall clock moves
//! in (the kernel's tick on Linux).
//!
//! ```text
//! cargo bench -p idemkv-bench --bench clocks                  # 20 M readings a row
//! IDEMKV_CLOCK_READINGS=100000 cargo bench -p idemkv-bench --bench clocks
//! ```

use idemkv::{Clock, SystemClock};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds a reading of `read`, over `readings` of them.
#[expect(clippy::cast_precision_loss, reason = "a mean")]
fn per_reading(readings: u64, mut read: impl FnMut() -> u64) -> f64 {
    let started = Instant::now();
    let mut sum = 0u64;
    for _ in 0..readings {
        sum = sum.wrapping_add(black_box(read()));
    }
    black_box(sum);
    started.elapsed().as_secs_f64() * 1e9 / readings as f64
}

/// How many times `SystemClock::now_ms` moved by each step (ms) over
/// `span` of readings.
fn wall_steps(span: Duration) -> BTreeMap<u64, u32> {
    let mut steps = BTreeMap::new();
    let started = Instant::now();
    let mut last = SystemClock.now_ms();
    while started.elapsed() < span {
        let now = SystemClock.now_ms();
        if now != last {
            *steps.entry(now.saturating_sub(last)).or_insert(0) += 1;
            last = now;
        }
    }
    steps
}

fn main() {
    // Before any other reading of `quanta`'s clock in this process.
    let calibrating = Instant::now();
    let origin = quanta::Instant::now();
    let calibration = calibrating.elapsed();
    let quick = !std::env::args().any(|arg| arg == "--bench");
    let readings: u64 = std::env::var("IDEMKV_CLOCK_READINGS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(if quick { 100_000 } else { 20_000_000 });
    let instant_origin = Instant::now();
    let counter = quanta::Clock::new();
    let counter_origin = counter.raw();
    let rows: [(&str, f64); 5] = [
        ("SystemClock::now_ms (TTLs)", per_reading(readings, || SystemClock.now_ms())),
        (
            "SystemTime::now as ms",
            per_reading(readings, || {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
            }),
        ),
        (
            "quanta::Instant::now (claims)",
            per_reading(readings, || u64::from(quanta::Instant::now().duration_since(origin).subsec_nanos())),
        ),
        (
            "quanta::Clock::raw (the counter)",
            per_reading(readings, || counter.delta_as_nanos(counter_origin, counter.raw())),
        ),
        ("Instant::now", per_reading(readings, || u64::from(instant_origin.elapsed().subsec_nanos()))),
    ];
    println!("{readings} readings a row");
    for (name, nanos) in rows {
        println!("{name:<32} {nanos:>7.1} ns a reading");
    }
    println!("quanta's first reading (its calibration): {:.2} ms", calibration.as_secs_f64() * 1e3);
    let steps = wall_steps(Duration::from_millis(if quick { 50 } else { 500 }));
    let steps: Vec<String> = steps.iter().map(|(step, count)| format!("{step} ms ×{count}")).collect();
    println!("SystemClock::now_ms moved in steps of: {}", steps.join(", "));
}
