//! The disk of the targets that open stores: a [`PowerCutStorage`] in
//! memory, so that they exercise the store's logic, not the file system.

use idemkv::io::{PowerCutStorage, Storage};
use std::path::Path;
use std::sync::OnceLock;

/// The store directory, the same for every run of a process. Only the
/// store's lock file is real (`Store::open` takes it on the real file
/// system), so the directory exists for real, once per process, in memory
/// where the machine has /dev/shm; it is left behind when the fuzzer exits.
pub fn directory() -> &'static Path {
    static DIRECTORY: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIRECTORY
        .get_or_init(|| {
            let shm = Path::new("/dev/shm");
            let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
            tempfile::Builder::new().prefix("idemkv-fuzz").tempdir_in(base).expect("tempdir")
        })
        .path()
}

/// A fresh in-memory disk on which `dir` and its parents exist durably.
pub fn disk(dir: &Path) -> PowerCutStorage {
    let storage = PowerCutStorage::new();
    storage.create_dir_all(dir).expect("mkdir");
    for parent in dir.ancestors().skip(1) {
        storage.sync_dir(parent).expect("sync");
    }
    storage
}

/// Writes `bytes` as the whole file `path`, durably.
#[allow(dead_code, reason = "not every target writes files")]
pub fn write(storage: &PowerCutStorage, path: &Path, bytes: &[u8]) {
    let file = storage.open(path, true).expect("create");
    file.write_all_at(bytes, 0).expect("write");
    file.sync().expect("sync");
    storage.sync_dir(path.parent().expect("a file in a directory")).expect("sync dir");
}
