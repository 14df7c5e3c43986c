//! Every command says what is wrong with the directory it was given, in one
//! line, with the exit code the README states (1 damage, 2 anything else):
//! a path that does not exist, a path that is a file, a directory the user
//! may not read, a directory without a manifest, a damaged manifest — and a
//! store the user may read but not write works for the read-only commands
//! and is left as it was.

use crate::common::snapshot::snapshot;
use crate::support::{assert_fails, chmod_all, idemkv, loaded_store, scratch, stderr, stdout, Restricted};
use std::os::unix::fs::PermissionsExt;

/// Every command that takes a store directory, with the arguments after it.
const COMMANDS: [&[&str]; 6] = [&["stats"], &["get", "{}", "key"], &["list"], &["verify"], &["compact"], &["repair"]];

/// `command` run on `dir`.
fn run(command: &[&str], dir: &str) -> std::process::Output {
    let mut args = vec![command[0], dir];
    args.extend(command.iter().skip(2));
    idemkv(&args)
}

#[test]
fn a_path_that_does_not_exist_is_said_so_and_not_created() {
    let dir = scratch();
    let missing = dir.path().join("no-such-store");
    let path = missing.to_str().expect("utf-8");
    for command in COMMANDS {
        assert_fails(&run(command, path), 2, &format!("{path} does not exist"), command[0]);
        assert!(!missing.exists(), "{} created the directory", command[0]);
    }
}

#[test]
fn a_path_that_is_a_file_is_not_a_directory() {
    let dir = scratch();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a store").expect("write");
    let path = file.to_str().expect("utf-8");
    for command in COMMANDS {
        assert_fails(&run(command, path), 2, "is not a directory", command[0]);
    }
    assert_eq!(std::fs::read(&file).expect("read"), b"not a store");
}

#[test]
fn a_directory_the_user_may_not_read_is_said_so() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 100);
    let path = store.to_str().expect("utf-8");
    let Some(user) = Restricted::new(dir.path()) else {
        println!("note: no user whom permission bits bind: an unreadable directory cannot be made; skipped");
        return;
    };
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    for command in COMMANDS {
        let mut args = vec![command[0], path];
        args.extend(command.iter().skip(2));
        let output = user.idemkv(&args);
        assert_fails(&output, 2, &format!("permission denied: this user may not list {path}"), command[0]);
        assert!(!stderr(&output).contains("not an idemkv store"), "{}: {}", command[0], stderr(&output));
    }
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o755)).expect("chmod back");
}

#[test]
fn a_store_the_user_may_read_but_not_write_is_read_and_left_alone() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 100);
    let path = store.to_str().expect("utf-8");
    let user = Restricted::new(dir.path());
    chmod_all(&store, 0o444, 0o555);
    let before = snapshot(&store);
    for command in [&["stats"][..], &["get", "{}", "load-0000000000000001"], &["list"], &["verify"]] {
        let mut args = vec![command[0], path];
        args.extend(command.iter().skip(2));
        let output = match &user {
            Some(user) => user.idemkv(&args),
            None => idemkv(&args),
        };
        assert!(output.status.success(), "{}: {}", command[0], stderr(&output));
        assert!(!stdout(&output).is_empty(), "{}", command[0]);
    }
    assert!(stdout(&idemkv(&["stats", path])).contains("100 live"));
    assert_eq!(snapshot(&store), before, "a read-only command changed the store");
    match &user {
        // Compaction writes: it is refused, and says why.
        Some(user) => assert_fails(&user.idemkv(&["compact", path]), 2, "permission denied", "compact"),
        None => println!("note: no user whom permission bits bind: compact cannot be refused here"),
    }
    chmod_all(&store, 0o644, 0o755);
}

#[test]
fn manifest_damage_is_damage_for_every_command() {
    let dir = scratch();
    let store = loaded_store(dir.path(), 100);
    let path = store.to_str().expect("utf-8");
    let manifest = store.join("MANIFEST");
    let mut bytes = std::fs::read(&manifest).expect("read");
    bytes[13] ^= 0x40; // the shard count, under the CRC
    std::fs::write(&manifest, bytes).expect("write");
    for command in COMMANDS {
        assert_fails(&run(command, path), 1, "MANIFEST at offset 0: manifest CRC mismatch", command[0]);
    }
}

#[test]
fn a_directory_without_a_manifest_is_not_a_store() {
    let dir = scratch();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let path = empty.to_str().expect("utf-8");
    for command in COMMANDS {
        assert_fails(&run(command, path), 2, "is not an idemkv store (it has no MANIFEST)", command[0]);
    }
    assert_eq!(std::fs::read_dir(&empty).expect("ls").count(), 0, "a file was created");
}
