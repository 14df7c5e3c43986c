//! Scratch directories for the targets that open stores.

/// A scratch directory, in memory where the machine has /dev/shm: the
/// targets exercise the store's logic, not the disk.
pub fn directory() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    tempfile::Builder::new().prefix("idemkv-fuzz").tempdir_in(base).expect("tempdir")
}
