//! What a record's `pwrite` costs over zeros filled in pieces of each
//! size: the file is zero-filled ahead, as idemkv's active segment is,
//! `IDEMKV_ZERO_FILL_PIECES` bytes a `write` (1 MiB and 16 KiB by default,
//! and none: records appended to an empty file), then 300-byte records are
//! written one after another over the zeros while a thread of its own
//! fdatasyncs the file over and over, as a shard's flusher does under
//! `Sync`. The page cache can keep a file's pages in folios as large as
//! the writes that made them (ext4 on Linux 6.18 here), and a small write
//! into a folio walks all of its blocks, as each fsync's writeback does:
//! the writes' cost follows the size of the pieces the zeros came in.
//!
//! ```text
//! cargo bench -p idemkv-bench --bench zero_fill
//! IDEMKV_ZERO_FILL_PIECES=0,4096,16384,65536,1048576 IDEMKV_ZERO_FILL_RECORDS=20000 cargo bench -p idemkv-bench --bench zero_fill
//! ```
//!
//! Each row: the writing thread's wall time per record and the process's
//! CPU time per record (the writer's and the fdatasyncing thread's), and
//! the fdatasyncs made meanwhile.

mod support;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use support::{as_f64, cpu_seconds};

const RECORD: [u8; 300] = [b'r'; 300];

/// Writes `records` records over zeros filled `piece` bytes a write (none
/// for 0) beside an fdatasyncing thread; returns wall and CPU µs a record
/// and the fdatasyncs made.
fn row(path: &std::path::Path, piece: usize, records: u64) -> (f64, f64, u64) {
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path).expect("open");
    let total = records * RECORD.len() as u64;
    if piece > 0 {
        let zeros = vec![0_u8; piece];
        let mut at = 0;
        while at < total {
            file.write_all_at(&zeros, at).expect("zero-fill");
            at += piece as u64;
        }
        file.sync_data().expect("fdatasync");
    }
    let file = Arc::new(file);
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (file, stop) = (Arc::clone(&file), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut fsyncs = 0;
            while !stop.load(Ordering::Relaxed) {
                file.sync_data().expect("fdatasync");
                fsyncs += 1;
            }
            fsyncs
        })
    };
    let (cpu_before, started) = (cpu_seconds(), Instant::now());
    for n in 0..records {
        file.write_all_at(&RECORD, n * RECORD.len() as u64).expect("write");
    }
    let wall = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let fsyncs = syncer.join().expect("syncer");
    let cpu = cpu_seconds() - cpu_before;
    (wall * 1e6 / as_f64(records), cpu * 1e6 / as_f64(records), fsyncs)
}

fn main() {
    let pieces: Vec<usize> = std::env::var("IDEMKV_ZERO_FILL_PIECES").ok().map_or_else(
        || vec![0, 16 << 10, 1 << 20],
        |list| list.split(',').map(|piece| piece.trim().parse().expect("IDEMKV_ZERO_FILL_PIECES: numbers")).collect(),
    );
    let records =
        std::env::var("IDEMKV_ZERO_FILL_RECORDS").ok().and_then(|value| value.parse().ok()).unwrap_or(200_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log");
    println!("{records} records of 300 bytes each, beside a thread that fdatasyncs over and over");
    println!("{:>12} | {:>14} {:>14} {:>9}", "zeros piece", "wall µs/rec", "CPU µs/rec", "fsyncs");
    for piece in pieces {
        let (wall, cpu, fsyncs) = row(&path, piece, records);
        let label = if piece == 0 { "none".to_string() } else { format!("{} KiB", piece >> 10) };
        println!("{label:>12} | {wall:>14.2} {cpu:>14.2} {fsyncs:>9}");
    }
}
