//! A retry storm, simulated: a service with a capacity of 700 attempts a
//! second stalls from 10 s to 15 s (it holds every request, then fails all
//! of them at once when it restarts), while callers keep sending 400
//! logical requests a second through `idemkv::client::RetryLayer`. Each
//! strategy (no jitter, full jitter, decorrelated jitter; each with and
//! without a retry budget) runs on tokio's paused clock, so 40 simulated
//! seconds take a moment. It prints the peak load and the time to recover
//! (from the restart to the last attempt the service had to shed), and
//! draws the load over time to `docs/retry_storm.svg` (or the path given).
//!
//! ```sh
//! cargo bench -p idemkv-bench --bench retry_storm
//! ```

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use idemkv::client::{Backoff, BoxError, BudgetConfig, Jitter, RetryLayer, RetryPolicy};
use plotters::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// The simulation's clock is cut into buckets of this length.
const BUCKET: Duration = Duration::from_millis(100);
const BUCKETS_PER_SECOND: u32 = 10;
const RUN: Duration = Duration::from_secs(40);
const STALL_START: Duration = Duration::from_secs(10);
const STALL_END: Duration = Duration::from_secs(15);
/// Attempts the service serves per bucket; it sheds the rest (a fast 503).
const CAPACITY_PER_BUCKET: u32 = 70;
const ARRIVALS_PER_SECOND: f64 = 400.0;
const SEED: u64 = 42;
/// The bottom of the log-scaled load axis.
const FLOOR: f64 = 10.0;

/// What the service saw, per bucket.
#[derive(Default)]
struct Load {
    attempts: Vec<u32>,
    shed: Vec<u32>,
}

/// One strategy's run.
struct Run {
    name: String,
    attempts_per_second: Vec<f64>,
    peak_per_second: f64,
    recovery: Duration,
    logical: u32,
    failed: u32,
}

/// The simulated service: stalled during the outage, then failing what it
/// held at the restart; past its capacity in a bucket, it sheds.
async fn serve(load: Arc<Mutex<Load>>, start: Instant) -> Result<Response<Full<Bytes>>, BoxError> {
    let elapsed = start.elapsed();
    let bucket = usize::try_from(elapsed.as_millis() / BUCKET.as_millis()).unwrap_or(usize::MAX);
    let over = {
        let mut load = load.lock().map_err(|_| "poisoned")?;
        if load.attempts.len() <= bucket {
            load.attempts.resize(bucket + 1, 0);
            load.shed.resize(bucket + 1, 0);
        }
        load.attempts[bucket] += 1;
        let over = load.attempts[bucket] > CAPACITY_PER_BUCKET && elapsed >= STALL_END;
        if over {
            load.shed[bucket] += 1;
        }
        over
    };
    let status = if (STALL_START..STALL_END).contains(&elapsed) {
        tokio::time::sleep_until(start + STALL_END).await;
        StatusCode::SERVICE_UNAVAILABLE
    } else if over {
        tokio::time::sleep(Duration::from_millis(1)).await;
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        tokio::time::sleep(Duration::from_millis(10)).await;
        StatusCode::OK
    };
    Ok(Response::builder().status(status).body(Full::default())?)
}

fn policy(jitter: Jitter, budget: bool) -> RetryPolicy {
    RetryPolicy::new()
        .max_attempts(8)
        .deadline(Duration::from_secs(60))
        .attempt_timeout(None)
        .backoff(Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).jitter(jitter))
        .budget(budget.then(BudgetConfig::default))
        .breaker(None)
        .seed(SEED)
}

/// Runs one strategy on a paused clock.
fn simulate(name: &str, jitter: Jitter, budget: bool) -> Result<Run, BoxError> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
    let load = Arc::new(Mutex::new(Load::default()));
    let (logical, failed) = runtime.block_on(drive(Arc::clone(&load), jitter, budget))?;
    let load = Arc::into_inner(load).ok_or("the service outlived the run")?.into_inner().map_err(|_| "poisoned")?;
    // Drawn up to the end of the run (the stragglers after it are left out).
    let run_buckets = (RUN.as_millis() / BUCKET.as_millis()) as usize;
    let attempts_per_second: Vec<f64> =
        load.attempts.iter().take(run_buckets).map(|count| f64::from(*count * BUCKETS_PER_SECOND)).collect();
    // The most attempts in any one second (ten buckets in a row).
    let peak_per_second = load
        .attempts
        .windows(BUCKETS_PER_SECOND as usize)
        .map(|second| f64::from(second.iter().sum::<u32>()))
        .fold(0.0, f64::max);
    let stall_end_bucket = (STALL_END.as_millis() / BUCKET.as_millis()) as usize;
    let last_shed = load.shed.iter().rposition(|shed| *shed > 0).filter(|bucket| *bucket >= stall_end_bucket);
    let recovery = last_shed
        .map_or(Duration::ZERO, |bucket| BUCKET * u32::try_from(bucket + 1 - stall_end_bucket).unwrap_or(u32::MAX));
    Ok(Run { name: name.to_string(), attempts_per_second, peak_per_second, recovery, logical, failed })
}

/// Sends logical requests at seeded exponential intervals for the run's
/// length; returns how many were sent and how many failed in the end.
async fn drive(load: Arc<Mutex<Load>>, jitter: Jitter, budget: bool) -> Result<(u32, u32), BoxError> {
    let start = Instant::now();
    let service = tower::service_fn(move |_: Request<Full<Bytes>>| serve(Arc::clone(&load), start));
    let client = RetryLayer::new(policy(jitter, budget)).layer(service);
    let mut rng = fastrand::Rng::with_seed(SEED);
    let mut tasks = tokio::task::JoinSet::new();
    let mut logical = 0;
    let mut next = Duration::ZERO;
    while next < RUN {
        // Absolute arrival times: the timer's millisecond rounding does not
        // add up over thousands of gaps.
        next += Duration::from_secs_f64(-(1.0 - rng.f64()).ln() / ARRIVALS_PER_SECOND);
        tokio::time::sleep_until(start + next).await;
        let request = Request::post("http://simulated.test/orders").body(Full::new(Bytes::from_static(b"{}")))?;
        let client = client.clone();
        tasks.spawn(async move { client.oneshot(request).await.is_ok_and(|response| response.status().is_success()) });
        logical += 1;
    }
    let mut failed = 0;
    while let Some(succeeded) = tasks.join_next().await {
        failed += u32::from(!succeeded?);
    }
    Ok((logical, failed))
}

/// Two panels, without and with the budget, one line per jitter.
fn draw(path: &str, runs: &[Run]) -> Result<(), BoxError> {
    let root = SVGBackend::new(path, (960, 720)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    let peak = runs.iter().flat_map(|run| run.attempts_per_second.iter().copied()).fold(0.0, f64::max) * 1.05;
    let colors = [RED, BLUE, RGBColor(0, 150, 0)];
    for (panel, (title, budgeted)) in panels.iter().zip([("no retry budget", false), ("retry budget 20 %", true)]) {
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("attempts per second at the service, {title}"), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..RUN.as_secs_f64(), (FLOOR..peak).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("simulated seconds")
            .y_desc("attempts / s (log)")
            .y_label_formatter(&|value| format!("{value:.0}"))
            .draw()?;
        let capacity = f64::from(CAPACITY_PER_BUCKET * BUCKETS_PER_SECOND);
        chart
            .draw_series(LineSeries::new([(0.0, capacity), (RUN.as_secs_f64(), capacity)], BLACK.stroke_width(1)))?
            .label("capacity")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
        let stalled = [(STALL_START.as_secs_f64(), FLOOR), (STALL_END.as_secs_f64(), peak)];
        chart.draw_series([Rectangle::new(stalled, BLACK.mix(0.08).filled())])?;
        for (run, color) in runs.iter().filter(|run| run.name.ends_with("budget") == budgeted).zip(colors) {
            let points = run.attempts_per_second.iter().enumerate().map(|(bucket, value)| {
                #[allow(clippy::cast_precision_loss, reason = "bucket indices are small")]
                let seconds = bucket as f64 * BUCKET.as_secs_f64();
                (seconds, value.max(FLOOR))
            });
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(run.name.clone())
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.9)).draw()?;
    }
    root.present()?;
    Ok(())
}

fn main() -> Result<(), BoxError> {
    // `cargo bench` passes `--bench`; the first other argument is the path.
    let path = std::env::args()
        .skip(1)
        .find(|argument| !argument.starts_with("--"))
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/retry_storm.svg").to_string());
    let strategies =
        [("no jitter", Jitter::None), ("full jitter", Jitter::Full), ("decorrelated jitter", Jitter::Decorrelated)];
    let mut runs = Vec::new();
    for budget in [false, true] {
        for (name, jitter) in strategies {
            let name = if budget { format!("{name}, budget") } else { name.to_string() };
            runs.push(simulate(&name, jitter, budget)?);
        }
    }
    println!("| strategy | peak attempts in 1 s | time to recover | logical requests | failed |");
    println!("|---|---:|---:|---:|---:|");
    for run in &runs {
        println!(
            "| {} | {:.0} | {:.1} s | {} | {} |",
            run.name,
            run.peak_per_second,
            run.recovery.as_secs_f64(),
            run.logical,
            run.failed
        );
    }
    draw(&path, &runs)?;
    println!("load over time: {path}");
    Ok(())
}
