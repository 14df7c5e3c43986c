//! Opening a store directory: refuse a directory that belongs to something
//! else, take the advisory lock, load or create the manifest, recover every
//! shard (in parallel), and settle one time floor for the whole store.

use crate::clock::Now;
use crate::config::Config;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::index::KeyHasher;
use crate::io::Storage;
use crate::manifest::{self, Manifest};
use crate::recovery::{create_shard, recover_shard, Recovered};
use crate::segment;
use crate::segment::catalog;
use crate::segment::header::HEADER_BYTES;
use crate::shard::Shard;
use crate::telemetry::{self, event, info_span};
use crate::waiters::WaitLimits;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

/// Shards of a new store when [`Config::shards`] is not set.
pub const DEFAULT_SHARDS: u32 = 4;

/// Name of the advisory lock file in a store directory.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Opens (or creates) the store in `dir`. See [`crate::Store::open`].
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
    let (now_ms, monotonic_ms) = (config.clock.now_ms(), config.clock.monotonic_ms());
    let recovered = if existing.is_some() {
        recover_shards(&*storage, &dir, manifest.shards, &hasher)?
    } else {
        // A new store: every shard is made before the manifest names them,
        // so a manifest never names a shard that was never made.
        let created = (0..manifest.shards)
            .map(|id| create_shard(&*storage, &segment::shard_dir(&dir, id), id))
            .collect::<Result<Vec<_>>>()?;
        // The shard folders' names, and the store directory's own name in
        // its parent, are made durable before the manifest can be: a power
        // cut must never keep a manifest whose shards it lost.
        storage.sync_dir(&dir).map_err(|error| Error::io("fsync", &dir, error))?;
        let parent = dir.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
        storage.sync_dir(parent).map_err(|error| Error::io("fsync", parent, error))?;
        manifest.store(&*storage, &dir)?;
        created
    };
    #[cfg(feature = "tracing")]
    for (id, shard) in (0..).zip(&recovered) {
        event!(debug, shard = id, records = shard.index.len(), segments = shard.lengths.len(), "shard recovered");
        if shard.torn_tail_bytes > 0 {
            event!(
                warn,
                shard = id,
                bytes = shard.torn_tail_bytes,
                "torn tail cut: a write in flight at a crash or power cut, never acknowledged as durable"
            );
        }
    }
    // One TTL floor for the whole store: the newest time any shard wrote,
    // or the clock if later.
    let floor_ms = recovered.iter().map(|shard| shard.max_updated_ms).fold(now_ms, u64::max);
    let now = Now { wall_ms: floor_ms, monotonic_ms };
    let shards = (0..)
        .zip(recovered)
        .map(|(id, recovered)| {
            Shard::new(id, Arc::clone(&storage), Arc::clone(&config.clock), config.segment_bytes, recovered, now)
        })
        .collect::<Result<_>>()?;
    storage.sync_dir(&dir).map_err(|error| Error::io("fsync", &dir, error))?;
    event!(
        info,
        shards = manifest.shards,
        created = existing.is_none(),
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "store opened"
    );
    Ok(Engine {
        dir,
        hasher,
        shards,
        lock_file: Mutex::new(Some(lock_file)),
        workers: Mutex::new(Vec::new()),
        stop: Arc::default(),
        compaction: Mutex::new(()),
        wait_limits: WaitLimits {
            per_key_max: config.waiters_per_key_max,
            total_max: config.waiters_max,
            total: AtomicUsize::new(0),
        },
        config,
    })
}

/// Rebuilds every shard, on as many threads as there are cores (shards are
/// independent), and returns them in shard order. The calling thread takes
/// part; helper threads the system refuses are simply not there (the others,
/// or the calling thread alone, recover every shard): a refused thread is no
/// reason to fail an open, let alone to panic.
fn recover_shards(storage: &dyn Storage, dir: &Path, shards: u32, hasher: &KeyHasher) -> Result<Vec<Recovered>> {
    // One shard needs no helper, nor the question of how many cores there
    // are (which reads files of its own on Linux).
    let threads = if shards > 1 {
        std::thread::available_parallelism().map_or(1, std::num::NonZero::get).min(shards as usize)
    } else {
        1
    };
    let next = AtomicU32::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let id = next.fetch_add(1, Ordering::Relaxed);
            if id >= shards {
                return done;
            }
            done.push((id, recover_shard(storage, &segment::shard_dir(dir, id), id, hasher)));
        }
    };
    let mut results: Vec<(u32, Result<Recovered>)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .filter_map(|_| std::thread::Builder::new().name("idemkv-recover".into()).spawn_scoped(scope, work).ok())
            .collect();
        let mut results = work();
        for helper in helpers {
            results.extend(helper.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        results
    });
    results.sort_by_key(|(id, _)| *id);
    results.into_iter().map(|(_, recovered)| recovered).collect()
}

/// A directory that holds files but no manifest belongs to something else:
/// never write into it. A crash during creation can leave the lock file, a
/// temporary manifest and shard folders that hold no record yet (shards are
/// made before the manifest), which count as empty.
fn refuse_foreign_directory(storage: &dyn Storage, dir: &Path) -> Result<()> {
    if storage.open(&dir.join(manifest::FILE_NAME), false).is_ok() {
        return Ok(());
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

/// Takes the advisory lock that keeps a second open (in this process or
/// another) out of the directory.
pub(crate) fn lock_directory(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE_NAME);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|error| Error::io("open", &path, error))?;
    match file.try_lock() {
        Ok(()) => {
            // The holder's process id, for the message of a refused open.
            let pid = std::process::id().to_string();
            file.set_len(0)
                .and_then(|()| std::os::unix::fs::FileExt::write_all_at(&file, pid.as_bytes(), 0))
                .map_err(|error| Error::io("write", &path, error))?;
            Ok(file)
        }
        Err(TryLockError::WouldBlock) => {
            let holder_pid = std::fs::read_to_string(&path).ok().and_then(|text| text.trim().parse().ok());
            Err(Error::Locked { path, holder_pid })
        }
        Err(TryLockError::Error(error)) => Err(Error::io("lock", path, error)),
    }
}
