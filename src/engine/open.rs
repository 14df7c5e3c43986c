//! Opening a store directory: refuse a directory that belongs to something
//! else, take the advisory lock, load or create the manifest, recover every
//! shard (in parallel), and settle one time floor for the whole store. A
//! read-only open takes the lock shared and changes nothing on disk.

use crate::clock::Now;
use crate::config::{Config, DEFAULT_SHARDS};
use crate::engine::entry::KeyHasher;
use crate::engine::ledger::Ledger;
use crate::engine::manifest::{self, Manifest};
use crate::engine::migrate;
use crate::engine::recovery::{create_shard, recover_shard, Access, Recovered};
use crate::engine::segment;
use crate::engine::segment::catalog;
use crate::engine::segment::header::HEADER_BYTES;
use crate::engine::shard::Shard;
use crate::engine::sync::sync_dirty;
use crate::engine::telemetry;
use crate::engine::waiters::WaitLimits;
use crate::engine::DirLock;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::events::{event, info_span};
use crate::format::{FormatVersion, LOCK_FILE_NAME};
use crate::io::Storage;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Opens (or creates) the store in `dir`. See [`crate::Store::open`],
/// which adds to an [`Error::Corruption`] what `idemkv repair` would do
/// about it.
pub(crate) fn open(dir: &Path, config: Config) -> Result<Engine> {
    config.validate()?;
    let dir = dir.to_path_buf();
    let _span = info_span!("open", path = %dir.display());
    #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
    let started = std::time::Instant::now();
    telemetry::describe();
    let storage = Arc::clone(&config.storage);
    storage.create_dir_all(&dir).map_err(|error| Error::io("create", &dir, error))?;
    refuse_foreign_directory(&*storage, &dir)?;
    let lock_file = lock_directory(&dir)?;
    let existing = Manifest::load(&*storage, &dir)?;
    if let (Some(manifest), Some(configured)) = (existing, config.shards) {
        if configured != manifest.shards {
            return Err(Error::ShardCountMismatch { on_disk: manifest.shards, configured });
        }
    }
    let manifest = existing.unwrap_or_else(|| Manifest::new(config.shards.unwrap_or(DEFAULT_SHARDS)));
    let hasher = KeyHasher::new(manifest.hash_key);
    // Both clocks read together: a lease found on disk gets the wall-clock
    // time it has left from here, on the monotonic scale from here.
    let now = Now { wall_ms: config.clock.now_ms(), monotonic_ms: config.clock.monotonic_ms() };
    let recovered = if existing.is_some() {
        recover_shards(&*storage, &dir, manifest.shards, &hasher, Access::ReadWrite)?
    } else {
        create_store(&*storage, &dir, &manifest)?
    };
    #[cfg(feature = "tracing")]
    tell_recovered(&recovered);
    let torn_tail_bytes = recovered.iter().map(|shard| shard.torn_tail_bytes).sum();
    let quota = Ledger::new(&config.quotas, config.key_bytes_max);
    let shards = build_shards(&config, recovered, now, quota.as_ref())?;
    storage.sync_dir(&dir).map_err(|error| Error::io("fsync", &dir, error))?;
    event!(
        info,
        shards = manifest.shards,
        created = existing.is_none(),
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "store opened"
    );
    let opened = Opened { read_only: false, torn_tail_bytes, quota };
    migrated(engine(dir, config, hasher, shards, Some(lock_file), opened), manifest)
}

/// A new store in `dir`: every shard is made before the manifest names
/// them, so a manifest never names a shard that was never made. The shard
/// folders' names, and the store directory's own name in its parent, are
/// made durable before the manifest can be: a power cut must never keep a
/// manifest whose shards it lost.
fn create_store(storage: &dyn Storage, dir: &Path, manifest: &Manifest) -> Result<Vec<Recovered>> {
    let created = (0..manifest.shards)
        .map(|id| create_shard(storage, &segment::shard_dir(dir, id), id))
        .collect::<Result<Vec<_>>>()?;
    storage.sync_dir(dir).map_err(|error| Error::io("fsync", dir, error))?;
    let parent = dir.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
    storage.sync_dir(parent).map_err(|error| Error::io("fsync", parent, error))?;
    manifest.store(storage, dir)?;
    Ok(created)
}

/// What recovery found in each shard, told as events: a debug event per
/// shard, and a warning for each torn tail cut.
#[cfg(feature = "tracing")]
fn tell_recovered(recovered: &[Recovered]) {
    for (id, shard) in (0..).zip(recovered) {
        event!(
            debug,
            shard = id,
            frames = shard.frames.len(),
            segments = shard.lengths.len(),
            hints_loaded = shard.hints_loaded,
            hints_ignored = shard.hints_ignored,
            "shard recovered"
        );
        if shard.torn_tail_bytes > 0 {
            event!(
                warn,
                shard = id,
                bytes = shard.torn_tail_bytes,
                "torn tail cut: damage past the durable mark (a write in flight at a crash or power cut)"
            );
        }
    }
}

/// `engine`, its store brought to [`FormatVersion::CURRENT`] if `manifest`
/// is of an earlier format (see [`migrate`]): its records moved, every
/// shard made durable, then the manifest of the new format written.
fn migrated(engine: Engine, manifest: Manifest) -> Result<Engine> {
    if manifest.version < FormatVersion::CURRENT {
        migrate_format(&engine, manifest)?;
    }
    Ok(engine)
}

fn migrate_format(engine: &Engine, manifest: Manifest) -> Result<()> {
    #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
    let moved = migrate::keyspaces(engine)?;
    sync_dirty(&engine.shards)?;
    Manifest { version: FormatVersion::CURRENT, ..manifest }.store(&*engine.config.storage, &engine.dir)?;
    event!(info, from = u8::from(manifest.version), moved, "store migrated to the current format");
    Ok(())
}

/// Opens the store in `dir` for reading only. See
/// [`crate::Store::open_read_only`]: nothing on disk is created, deleted,
/// truncated, renamed or synced.
pub(crate) fn open_read_only(dir: &Path, config: Config) -> Result<Engine> {
    config.validate()?;
    let dir = dir.to_path_buf();
    let _span = info_span!("open_read_only", path = %dir.display());
    telemetry::describe();
    let storage = Arc::clone(&config.storage);
    check_directory(&*storage, &dir)?;
    // The shared lock before the manifest: no writer is creating the store
    // or changing its files while they are read.
    let lock_file = lock_shared(&dir)?;
    let manifest = Manifest::load(&*storage, &dir)?.ok_or_else(|| Error::NotAStore { path: dir.clone() })?;
    if let Some(configured) = config.shards.filter(|configured| *configured != manifest.shards) {
        return Err(Error::ShardCountMismatch { on_disk: manifest.shards, configured });
    }
    let hasher = KeyHasher::new(manifest.hash_key);
    let now = Now { wall_ms: config.clock.now_ms(), monotonic_ms: config.clock.monotonic_ms() };
    let mut recovered = recover_shards(&*storage, &dir, manifest.shards, &hasher, Access::ReadOnly)?;
    let torn_tail_bytes = recovered.iter().map(|shard| shard.torn_tail_bytes).sum();
    // Found, not cut: the shards' count of bytes cut stays 0.
    for shard in &mut recovered {
        shard.torn_tail_bytes = 0;
    }
    let quota = Ledger::new(&config.quotas, config.key_bytes_max);
    let shards = build_shards(&config, recovered, now, quota.as_ref())?;
    Ok(engine(dir, config, hasher, shards, lock_file, Opened { read_only: true, torn_tail_bytes, quota }))
}

/// The manifest of an existing store directory, read without changing
/// anything (for read-only opens, verify and repair).
///
/// # Errors
/// [`Error::NotFound`] when `dir` does not exist, [`Error::NotAStore`] when
/// it has no manifest, a damaged manifest as [`Error::Corruption`], I/O
/// errors (a directory that may not be read, a path that is a file).
pub(crate) fn existing_manifest(storage: &dyn Storage, dir: &Path) -> Result<Manifest> {
    check_directory(storage, dir)?;
    Manifest::load(storage, dir)?.ok_or_else(|| Error::NotAStore { path: dir.to_path_buf() })
}

/// Listing the directory tells a missing or unreadable directory (or a
/// path that is a file) apart from one without a manifest.
fn check_directory(storage: &dyn Storage, dir: &Path) -> Result<()> {
    match storage.read_dir(dir) {
        Ok(_) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(Error::NotFound { path: dir.to_path_buf() }),
        Err(error) => Err(Error::io("list", dir, error)),
    }
}

/// How an engine was opened.
struct Opened {
    read_only: bool,
    torn_tail_bytes: u64,
    quota: Option<Arc<Ledger>>,
}

/// The shards recovered at open, at `now` (one TTL floor for the whole
/// store: the newest time any shard wrote, or the clock if later), built
/// on as many threads as recovery used: building drops expired keys and
/// sums each index's accounting, a pass over every key (and with quotas,
/// counts each live record's scope, read back from its frame).
fn build_shards(
    config: &Config,
    recovered: Vec<Recovered>,
    now: Now,
    quota: Option<&Arc<Ledger>>,
) -> Result<Box<[Shard]>> {
    let floor_ms = recovered.iter().map(|shard| shard.max_updated_ms).fold(now.wall_ms, u64::max);
    let now = Now { wall_ms: floor_ms, monotonic_ms: now.monotonic_ms };
    let count = u32::try_from(recovered.len()).unwrap_or(u32::MAX);
    let slots: Vec<Mutex<Option<Recovered>>> = recovered.into_iter().map(|shard| Mutex::new(Some(shard))).collect();
    let build = |id: u32| {
        // Each id is built once, so its slot is full.
        let recovered = slots[id as usize].lock().take().ok_or(Error::Closed)?;
        let shard = Shard::new(id, config, recovered, now)?;
        if let Some(ledger) = quota {
            shard.attach_quota(ledger)?;
        }
        Ok(shard)
    };
    on_cores(count, build).into_iter().collect()
}

fn engine(
    dir: PathBuf,
    config: Config,
    hasher: KeyHasher,
    shards: Box<[Shard]>,
    lock_file: Option<DirLock>,
    opened: Opened,
) -> Engine {
    Engine {
        dir,
        hasher,
        shards,
        lock_file: Mutex::new(lock_file),
        workers: Mutex::new(Vec::new()),
        handles: std::sync::atomic::AtomicUsize::new(0),
        stop: Arc::default(),
        compaction: Mutex::new(()),
        wait_limits: WaitLimits {
            per_key_max: config.waiters_per_key_max,
            total_max: config.waiters_max,
            total: AtomicUsize::new(0),
        },
        read_only: opened.read_only,
        torn_tail_bytes: opened.torn_tail_bytes,
        quota: opened.quota,
        config,
    }
}

/// Rebuilds every shard, on as many threads as there are cores (shards are
/// independent), and returns them in shard order.
fn recover_shards(
    storage: &dyn Storage,
    dir: &Path,
    shards: u32,
    hasher: &KeyHasher,
    access: Access,
) -> Result<Vec<Recovered>> {
    on_cores(shards, |id| recover_shard(storage, &segment::shard_dir(dir, id), id, hasher, access))
        .into_iter()
        .collect()
}

/// Runs `work` for every id in `0..count` on as many threads as there are
/// cores (at most `count`), and returns the results in id order. The
/// calling thread takes part; helper threads the system refuses are simply
/// not there (the others, or the calling thread alone, do the work): a
/// refused thread is no reason to fail an open, let alone to panic.
fn on_cores<T: Send>(count: u32, work: impl Fn(u32) -> T + Sync) -> Vec<T> {
    // One item needs no helper, nor the question of how many cores there
    // are (which reads files of its own on Linux).
    let threads = if count > 1 {
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(count as usize)
    } else {
        1
    };
    let next = AtomicU32::new(0);
    let run = || {
        let mut done = Vec::new();
        loop {
            let id = next.fetch_add(1, Ordering::Relaxed);
            if id >= count {
                return done;
            }
            done.push((id, work(id)));
        }
    };
    let mut results: Vec<(u32, T)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| std::thread::Builder::new().name("idemkv-recover".into()).spawn_scoped(scope, run).ok())
            .collect();
        let mut results = run();
        for helper in helpers {
            results.extend(helper.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        results
    });
    results.sort_by_key(|(id, _)| *id);
    results.into_iter().map(|(_, result)| result).collect()
}

/// A directory that holds files but no manifest belongs to something else:
/// never write into it. A crash during creation can leave the lock file, a
/// temporary manifest and shard folders that hold no record yet (shards are
/// made before the manifest), which count as empty.
fn refuse_foreign_directory(storage: &dyn Storage, dir: &Path) -> Result<()> {
    match storage.open_read_only(&dir.join(manifest::FILE_NAME)) {
        // A manifest that is there but may not be read is reported by its
        // load (or by the lock before it), not taken for a foreign one.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        _ => return Ok(()),
    }
    let entries = storage.read_dir(dir).map_err(|error| Error::io("list", dir, error))?;
    for path in entries {
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
        let creation_leftover = name == LOCK_FILE_NAME
            || name == manifest::TEMP_NAME
            || (name.starts_with("shard-") && holds_no_record(storage, &path)?);
        if !creation_leftover {
            return Err(Error::NotAStore { path: dir.to_path_buf() });
        }
    }
    Ok(())
}

/// Whether a shard folder holds nothing but catalogs and segments without
/// a record.
fn holds_no_record(storage: &dyn Storage, shard_dir: &Path) -> Result<bool> {
    let Ok(entries) = storage.read_dir(shard_dir) else {
        return Ok(false);
    };
    for path in entries {
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("");
        if name == catalog::FILE_NAME || name == catalog::TEMP_NAME {
            continue;
        }
        if segment::parse_segment_name(&path).is_none() {
            return Ok(false);
        }
        let file = storage.open(&path, false).map_err(|error| Error::io("open", &path, error))?;
        if file.len().map_err(|error| Error::io("stat", &path, error))? > HEADER_BYTES as u64 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// How long an open waits out a lock held on behalf of this process by a
/// child between its fork and its exec.
const TRANSIENT_HOLD_MAX: Duration = Duration::from_millis(500);

/// Whether the lock of `path` is held for this process although no handle
/// of this process holds it: the file names this process as the holder,
/// and no live [`DirLock`] of it does. An flock belongs to the open file,
/// and a child process this process is starting shares this process's
/// open files from its fork until its exec closes them (they are
/// close-on-exec): a store dropped meanwhile stays locked for that moment.
fn transient_holder(path: &Path) -> bool {
    holder_pid(path) == Some(std::process::id()) && !DirLock::held_here(path)
}

/// Tries `lock` on `file`, waiting out a transient holder (see
/// [`transient_holder`]) for at most [`TRANSIENT_HOLD_MAX`].
fn try_lock_patiently(
    file: &File,
    path: &Path,
    lock: impl Fn(&File) -> std::result::Result<(), TryLockError>,
) -> std::result::Result<(), TryLockError> {
    let started = std::time::Instant::now();
    loop {
        match lock(file) {
            Err(TryLockError::WouldBlock) if started.elapsed() < TRANSIENT_HOLD_MAX && transient_holder(path) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            answer => return answer,
        }
    }
}

/// Takes the advisory lock that keeps a second open (in this process or
/// another) out of the directory: exclusive, refused while any handle,
/// writer or read-only, holds the lock.
pub(crate) fn lock_directory(dir: &Path) -> Result<DirLock> {
    let path = dir.join(LOCK_FILE_NAME);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|error| Error::io("open", &path, error))?;
    match try_lock_patiently(&file, &path, File::try_lock) {
        Ok(()) => {
            // The holder's process id, for the message of a refused open.
            let pid = std::process::id().to_string();
            file.set_len(0)
                .and_then(|()| std::os::unix::fs::FileExt::write_all_at(&file, pid.as_bytes(), 0))
                .map_err(|error| Error::io("write", &path, error))?;
            Ok(DirLock::new(file, path))
        }
        Err(TryLockError::WouldBlock) => {
            // A shared lock that can be had beside the holders means they
            // are all read-only handles, which cannot write their process
            // id: the id in the file is that of an earlier writer.
            let holder_pid = if file.try_lock_shared().is_ok() { None } else { holder_pid(&path) };
            Err(Error::Locked { path, holder_pid })
        }
        Err(TryLockError::Error(error)) => Err(Error::io("lock", path, error)),
    }
}

/// Takes the shared lock of a read-only open: beside other read-only
/// handles, refused while a writer holds the exclusive lock (its compaction
/// could delete a segment while it is read). A store without a lock file
/// was never opened by a writer (a writer creates the file before anything
/// else), so there is nothing to lock and nothing is created.
fn lock_shared(dir: &Path) -> Result<Option<DirLock>> {
    let path = dir.join(LOCK_FILE_NAME);
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(Error::io("open", path, error)),
    };
    match try_lock_patiently(&file, &path, File::try_lock_shared) {
        Ok(()) => Ok(Some(DirLock::new(file, path))),
        Err(TryLockError::WouldBlock) => Err(Error::Locked { holder_pid: holder_pid(&path), path }),
        Err(TryLockError::Error(error)) => Err(Error::io("lock", path, error)),
    }
}

/// The process id a writer wrote in the lock file, if it is there.
fn holder_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok().and_then(|text| text.trim().parse().ok())
}
