//! `Store::open_read_only` reads a store without changing a byte of it: on
//! files and folders made read-only, through a storage that records every
//! writing call, with a torn tail it must not cut and leftovers of an
//! unfinished roll and compaction it must not delete. Reads work; every
//! call that would write is refused with `Error::ReadOnly`.

use crate::common::snapshot::snapshot;
use crate::common::{acquire, fingerprint, START_MS};
use idemkv::io::{StdStorage, Storage, StorageFile};
use idemkv::{Claim, ClaimRequest, Config, Durability, Error, LeaseToken, ManualClock, State, Store};
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A storage that passes everything to the real file system and writes
/// down every call that could change it.
#[derive(Debug, Default)]
struct Recording {
    writes: Arc<Mutex<Vec<String>>>,
}

impl Recording {
    fn note(&self, call: String) {
        self.writes.lock().expect("log").push(call);
    }
}

#[derive(Debug)]
struct RecordingFile {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    writes: Arc<Mutex<Vec<String>>>,
}

impl RecordingFile {
    fn note(&self, call: &str) {
        self.writes.lock().expect("log").push(format!("{call} {}", self.path.display()));
    }
}

impl StorageFile for RecordingFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.note("write");
        self.file.write_all_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.note("set_len");
        self.file.set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }
    fn sync(&self) -> io::Result<()> {
        self.note("sync");
        self.file.sync()
    }
}

impl Storage for Recording {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        self.note(format!("open for writing (create: {create}) {}", path.display()));
        StdStorage.open(path, create)
    }
    fn open_read_only(&self, path: &Path) -> io::Result<Arc<dyn StorageFile>> {
        let file = StdStorage.open_read_only(path)?;
        Ok(Arc::new(RecordingFile { file, path: path.to_path_buf(), writes: Arc::clone(&self.writes) }))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.note(format!("create_dir_all {}", path.display()));
        StdStorage.create_dir_all(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        StdStorage.read_dir(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.note(format!("rename {} {}", from.display(), to.display()));
        StdStorage.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.note(format!("remove_file {}", path.display()));
        StdStorage.remove_file(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.note(format!("sync_dir {}", path.display()));
        StdStorage.sync_dir(path)
    }
}

/// Sets the permission bits of every file (`file_mode`) and folder
/// (`dir_mode`) under `dir`, the deepest first.
fn chmod_all(dir: &Path, file_mode: u32, dir_mode: u32) {
    let mut paths: Vec<PathBuf> = snapshot(dir).into_keys().collect();
    paths.sort_by_key(|path| std::cmp::Reverse(path.components().count()));
    for path in paths {
        let mode = if path.is_dir() { dir_mode } else { file_mode };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}

fn config(clock: &ManualClock) -> Config {
    Config::new().shards(2).durability(Durability::Buffered).clock(Arc::new(clock.clone()))
}

/// Records in every state, then a crash: no fsync of the last writes, a
/// torn tail (bytes of a record never finished) on shard 0's active segment, and the leftovers of
/// an unfinished roll and compaction in shard 1. Returns the token of the
/// Processing record and the torn tail's length.
fn crashed_store(dir: &Path, clock: &ManualClock) -> (LeaseToken, u64) {
    let store = Store::open(dir, config(clock)).expect("open");
    for index in 0..20 {
        let key = format!("completed-{index}");
        acquire(&store, &ClaimRequest::new(&key, fingerprint("c"))).complete(b"done").expect("complete");
    }
    acquire(&store, &ClaimRequest::new("failed", fingerprint("f"))).fail(b"declined").expect("fail");
    let short = ClaimRequest::new("expired", fingerprint("e")).ttl(Duration::from_secs(1));
    acquire(&store, &short).complete(b"gone soon").expect("complete");
    let token = acquire(&store, &ClaimRequest::new("processing", fingerprint("p"))).into_token();
    drop(store);
    let active = crate::common::segment_files(dir, 0).pop().expect("a segment");
    let end = crate::common::records_end(&active);
    let file = OpenOptions::new().write(true).open(&active).expect("open");
    file.set_len(end).expect("cut the zeros");
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xA5; 4096], end).expect("torn bytes");
    let shard_1 = dir.join("shard-0001");
    let last = crate::common::segment_files(dir, 1).pop().expect("a segment");
    let next = last.file_stem().and_then(|stem| stem.to_str()).and_then(|stem| stem.parse::<u32>().ok());
    let next = next.expect("a segment id") + 1;
    std::fs::write(shard_1.join(format!("{next:010}.seg")), b"").expect("unfinished roll");
    std::fs::write(shard_1.join("0000000001.seg.compact"), b"half a rewrite").expect("unfinished compaction");
    std::fs::write(shard_1.join("CATALOG.tmp"), b"half a catalog").expect("unfinished catalog");
    (token, 4096)
}

/// Whether permission bits bind this process: root (or a process with
/// `CAP_DAC_OVERRIDE`) may write a file whose write bits are all clear.
fn permission_bits_bind(dir: &Path) -> bool {
    let probe = dir.join("probe");
    std::fs::write(&probe, b"x").expect("probe");
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let binds = OpenOptions::new().write(true).open(&probe).is_err();
    std::fs::remove_file(&probe).expect("remove probe");
    binds
}

#[test]
fn a_read_only_open_reads_everything_and_changes_nothing() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("store");
    let clock = ManualClock::new(START_MS);
    let (token, torn_bytes) = crashed_store(&dir, &clock);
    let binding = permission_bits_bind(parent.path());
    if !binding {
        println!("note: permission bits do not bind this user (root?); a read-only mode proves nothing here, the recorded calls and the byte-for-byte comparison do");
    }
    chmod_all(&dir, 0o444, 0o555);
    let before = snapshot(&dir);
    let recording = Recording::default();
    let writes = Arc::clone(&recording.writes);

    let store = Store::open_read_only(&dir, config(&clock).storage(Arc::new(recording))).expect("read-only open");
    assert!(store.is_read_only());
    assert_eq!(store.torn_tail_bytes_found(), torn_bytes);
    assert_eq!(store.stats().torn_tail_bytes_cut, 0, "nothing was cut");
    // Past the short TTL: one record expires in memory, not on disk.
    clock.advance(Duration::from_secs(2));
    let census = store.census().expect("census");
    assert_eq!((census.processing, census.completed, census.failed, census.expired), (1, 20, 1, 1));
    assert_eq!(store.get(b"", b"completed-7").expect("get").expect("present").response, b"done");
    assert_eq!(store.get(b"", b"failed").expect("get").expect("present").state, State::Failed);
    assert_eq!(store.get(b"", b"processing").expect("get").expect("present").state, State::Processing);
    assert!(store.get(b"", b"expired").expect("get").is_none());
    let records: Vec<_> = store.iter().collect::<Result<_, _>>().expect("iterate");
    assert_eq!(records.len(), 22);

    let refused = |result: Result<(), Error>, call: &str| {
        assert!(matches!(result, Err(Error::ReadOnly { .. })), "{call}: {result:?}");
    };
    let request = ClaimRequest::new("new-key", fingerprint("n"));
    refused(store.claim(&request).map(|_| ()), "claim");
    refused(store.claim_wait(&request, Duration::from_millis(1)).map(|_| ()), "claim_wait");
    refused(store.complete(&token, b"late"), "complete");
    refused(store.fail(&token, b"late"), "fail");
    refused(store.release(&token), "release");
    refused(store.renew(&token, Duration::from_secs(5)).map(|_| ()), "renew");
    refused(store.remove(b"", b"completed-1").map(|_| ()), "remove");
    refused(store.compact().map(|_| ()), "compact");
    store.sync().expect("nothing to sync");
    assert_eq!(store.get(b"", b"completed-1").expect("get").expect("not removed").response, b"done");
    let second = Store::open_read_only(&dir, config(&clock)).expect("a second reader beside the first");
    drop(second);
    store.close().expect("close");

    assert_eq!(*writes.lock().expect("log"), Vec::<String>::new(), "writing calls");
    let after = snapshot(&dir);
    for (path, was) in &before {
        assert_eq!(after.get(path), Some(was), "{} changed", path.display());
    }
    assert_eq!(after.len(), before.len(), "files were added");

    // A writable open then does what the read-only one left: cuts the tail,
    // deletes the leftovers.
    chmod_all(&dir, 0o644, 0o755);
    let store = Store::open(&dir, config(&clock)).expect("writable open");
    assert_eq!(store.stats().torn_tail_bytes_cut, torn_bytes);
    assert!(!dir.join("shard-0001/CATALOG.tmp").exists());
    assert!(!dir.join("shard-0001/0000000001.seg.compact").exists());
    let Claim::Replay(record) = store.claim(&ClaimRequest::new("completed-3", fingerprint("c"))).expect("claim") else {
        panic!("a replay");
    };
    assert_eq!(record.response, b"done");
}

#[test]
fn a_torn_tail_stays_on_disk_through_read_only_opens() {
    let parent = tempfile::tempdir().expect("tempdir");
    let dir = parent.path().join("store");
    let clock = ManualClock::new(START_MS);
    let (_, torn_bytes) = crashed_store(&dir, &clock);
    let active = crate::common::segment_files(&dir, 0).pop().expect("a segment");
    let len = std::fs::metadata(&active).expect("stat").len();
    for _ in 0..2 {
        let store = Store::open_read_only(&dir, config(&clock)).expect("read-only open");
        assert_eq!(store.torn_tail_bytes_found(), torn_bytes);
        assert_eq!(std::fs::metadata(&active).expect("stat").len(), len, "the tail was cut");
        let torn_tails = idemkv::store::verify(&dir).expect("verify").torn_tails;
        assert!(torn_tails.iter().any(|span| span.file == active && span.length == torn_bytes), "{torn_tails:?}");
    }
}

#[test]
fn a_missing_or_foreign_directory_is_refused_and_nothing_is_created() {
    let parent = tempfile::tempdir().expect("tempdir");
    let missing = parent.path().join("missing");
    let error = Store::open_read_only(&missing, Config::new()).expect_err("missing");
    assert!(matches!(&error, Error::NotFound { path } if *path == missing), "{error:?}");
    assert_eq!(error.to_string(), format!("{} does not exist", missing.display()));
    assert!(!missing.exists());
    let empty = parent.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let error = Store::open_read_only(&empty, Config::new()).expect_err("empty");
    assert!(matches!(error, Error::NotAStore { .. }), "{error:?}");
    assert_eq!(std::fs::read_dir(&empty).expect("ls").count(), 0, "something was created");
    let file = parent.path().join("file");
    std::fs::write(&file, b"not a directory").expect("write");
    let error = Store::open_read_only(&file, Config::new()).expect_err("a file");
    assert!(matches!(&error, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotADirectory), "{error:?}");
}

#[test]
fn a_damaged_manifest_is_corruption() {
    let dir = tempfile::tempdir().expect("tempdir");
    Store::open(dir.path(), Config::new()).expect("create").close().expect("close");
    let manifest = dir.path().join("MANIFEST");
    let mut bytes = std::fs::read(&manifest).expect("read");
    bytes[13] ^= 0x40;
    std::fs::write(&manifest, bytes).expect("write");
    let error = Store::open_read_only(dir.path(), Config::new()).expect_err("damaged");
    assert!(matches!(error, Error::Corruption { .. }), "{error:?}");
}
