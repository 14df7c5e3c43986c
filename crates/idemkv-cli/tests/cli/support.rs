//! Running the `idemkv` binary as a user would, for the `cli_*` tests.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `idemkv` with `args` and waits for it.
pub fn idemkv(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkv")).args(args).output().expect("run idemkv")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A temporary directory under the target directory: on the disk the
/// project builds on (never a memory file system such as a tmpfs `/tmp`),
/// so that fsync latencies are those of a real disk.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

/// Checks that a command failed with `code` and a one-line message that
/// contains `expected`, without a panic.
pub fn assert_fails(output: &Output, code: i32, expected: &str, what: &str) {
    let message = stderr(output);
    assert_eq!(output.status.code(), Some(code), "{what}: {message}");
    assert!(message.starts_with("idemkv: "), "{what}: {message}");
    assert_eq!(message.trim_end().lines().count(), 1, "{what}: not one line: {message}");
    assert!(message.contains(expected), "{what}: {message:?} does not say {expected:?}");
    assert!(!message.contains("panicked"), "{what}: {message}");
}

/// A store made by `idemkv load` (`keys` keys, all completed), in `dir`.
pub fn loaded_store(dir: &Path, keys: u32) -> PathBuf {
    let store = dir.join("store");
    let path = store.to_str().expect("utf-8 path");
    let keys = keys.to_string();
    let output = idemkv(&["load", path, "--duration", "0.5", "--threads", "2", "--keys", &keys, "--value-bytes", "64"]);
    assert!(output.status.success(), "load failed: {}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("fencing check: no key was ever held twice"), "{text}");
    store
}

/// Runs `command` in bash and returns the exit status of the first command
/// of its pipeline and what bash printed on stderr.
pub fn pipeline(command: &str) -> (i32, String) {
    let script = format!("{command}; exit ${{PIPESTATUS[0]}}");
    let output = Command::new("bash").args(["-c", &script]).output().expect("run bash");
    (output.status.code().unwrap_or(-1), stderr(&output))
}

/// The path of the built binary, for shell pipelines.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_idemkv")
}

/// Whether permission bits bind this process: root (or a process with
/// `CAP_DAC_OVERRIDE`) reads and writes whatever the bits say.
pub fn permission_bits_bind(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let probe = dir.join("permission-probe");
    std::fs::write(&probe, b"x").expect("probe");
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let binds = std::fs::read(&probe).is_err();
    std::fs::remove_file(&probe).expect("remove probe");
    binds
}

/// Runs `idemkv` as a user whom permission bits bind: this process's own
/// user if they bind it, else (as root) `nobody` through `setpriv`.
#[derive(Debug)]
pub struct Restricted {
    prefix: Vec<String>,
}

impl Restricted {
    /// `None` when no such user is at hand (then the test says so and
    /// skips what it cannot check). `dir` is a scratch directory, opened up
    /// for other users to reach the stores in it when needed.
    pub fn new(dir: &Path) -> Option<Self> {
        use std::os::unix::fs::PermissionsExt;
        if permission_bits_bind(dir) {
            return Some(Restricted { prefix: Vec::new() });
        }
        let prefix: Vec<String> =
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"].map(String::from).to_vec();
        let works =
            Command::new(&prefix[0]).args(&prefix[1..]).arg("true").status().is_ok_and(|status| status.success());
        if !works {
            println!("note: permission bits do not bind this user (root?) and setpriv cannot drop to nobody");
            return None;
        }
        // Every folder from the scratch directory up must be searchable by
        // `nobody`; a temporary directory is made 0700.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod scratch");
        let mut ancestor = dir.parent();
        while let Some(folder) = ancestor {
            let mode = std::fs::metadata(folder).expect("stat").permissions().mode();
            if mode & 0o001 == 0 {
                println!("note: {} is not searchable by other users; permission checks skipped", folder.display());
                return None;
            }
            ancestor = folder.parent();
        }
        println!("note: running as root: the permission checks run idemkv as nobody (setpriv)");
        Some(Restricted { prefix })
    }

    /// Runs `idemkv` with `args` as the restricted user.
    pub fn idemkv(&self, args: &[&str]) -> Output {
        let mut command = match self.prefix.split_first() {
            Some((program, rest)) => {
                let mut command = Command::new(program);
                command.args(rest).arg(env!("CARGO_BIN_EXE_idemkv"));
                command
            }
            None => Command::new(env!("CARGO_BIN_EXE_idemkv")),
        };
        command.args(args).output().expect("run idemkv")
    }
}

/// Sets the permission bits of every file (`file_mode`) and folder
/// (`dir_mode`) under `dir`, itself included.
pub fn chmod_all(dir: &Path, file_mode: u32, dir_mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    // Folders last, so that they can still be listed while files change.
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).expect("ls").map(|entry| entry.expect("entry").path()));
        }
        paths.push(path);
    }
    for path in paths.iter().rev() {
        let mode = if path.is_dir() { dir_mode } else { file_mode };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}
