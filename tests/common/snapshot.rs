//! Every file and folder under a directory as it stands, to show that a
//! command or a read-only open changed nothing.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Each path under a directory: its bytes (files), length, modification
/// time and permissions.
pub type Snapshot = BTreeMap<PathBuf, (Option<Vec<u8>>, u64, SystemTime, u32)>;

/// Every file and folder under `dir`, itself included.
pub fn snapshot(dir: &Path) -> Snapshot {
    let mut found = Snapshot::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        let bytes = if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).expect("ls").map(|entry| entry.expect("entry").path()));
            None
        } else {
            Some(std::fs::read(&path).expect("read"))
        };
        found.insert(path, (bytes, meta.len(), meta.modified().expect("mtime"), meta.permissions().mode()));
    }
    found
}
