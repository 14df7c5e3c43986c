//! The lock of a read-only open: shared with other read-only handles,
//! refused while a writer holds the store (naming the writer's process), and
//! refusing writers while it is held. A store whose lock file is gone was
//! never held by a writer; a read-only open then locks nothing and creates
//! nothing.

use idemkv::{store::LOCK_FILE_NAME, Config, Error, Store};

#[test]
fn a_live_writer_keeps_read_only_opens_out_naming_its_process() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = Store::open(dir.path(), Config::new()).expect("writer");
    let error = Store::open_read_only(dir.path(), Config::new()).expect_err("a writer holds the store");
    let pid = std::process::id();
    assert!(matches!(error, Error::Locked { holder_pid: Some(holder), .. } if holder == pid), "{error:?}");
    assert!(error.to_string().contains(&format!("(process {pid})")), "{error}");
    writer.close().expect("close");
    Store::open_read_only(dir.path(), Config::new()).expect("open once the writer is gone");
}

#[test]
fn readers_share_the_lock_and_keep_writers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    Store::open(dir.path(), Config::new()).expect("create").close().expect("close");
    let first = Store::open_read_only(dir.path(), Config::new()).expect("first reader");
    let second = Store::open_read_only(dir.path(), Config::new()).expect("second reader");
    let error = Store::open(dir.path(), Config::new()).expect_err("readers hold the store");
    // The process id in the file is the last writer's, not a reader's: it
    // is not named.
    assert!(matches!(error, Error::Locked { holder_pid: None, .. }), "{error:?}");
    assert!(error.to_string().contains("read-only"), "{error}");
    let repair = idemkv::store::repair(dir.path()).expect_err("repair takes the lock too");
    assert!(matches!(repair, Error::Locked { .. }), "{repair:?}");
    drop(first);
    assert!(matches!(Store::open(dir.path(), Config::new()), Err(Error::Locked { .. })));
    second.close().expect("close");
    Store::open(dir.path(), Config::new()).expect("open once the readers are gone").close().expect("close");
}

#[test]
fn without_a_lock_file_nothing_is_locked_nor_created() {
    let dir = tempfile::tempdir().expect("tempdir");
    Store::open(dir.path(), Config::new()).expect("create").close().expect("close");
    let lock = dir.path().join(LOCK_FILE_NAME);
    std::fs::remove_file(&lock).expect("remove the lock file");
    let reader = Store::open_read_only(dir.path(), Config::new()).expect("read-only open");
    assert!(!lock.exists(), "a read-only open created the lock file");
    assert_eq!(reader.census().expect("census").completed, 0);
}
