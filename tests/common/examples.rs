//! The examples the tests run as a user runs them: the binary cargo puts
//! in `target/<profile>/examples/`, built by `cargo build --example NAME`
//! in this test binary's target directory, profile and features before a
//! test first runs it. `cargo test` alone builds no example for a
//! `--test` filter, and with `--all-targets` builds them as tests only (no
//! binary there); and an example it built before may be stale. Cargo
//! decides: when the binary is fresh the build does nothing, as in
//! `bash .ci/test`, which builds the examples with its tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// The folder of this test binary's package: the library's root, or a
/// test package of the same workspace (`tests/fleets`, `tests/http`), from
/// whose manifest cargo builds the library's examples all the same.
const PACKAGE: &str = env!("CARGO_MANIFEST_DIR");

/// Every feature of the library and whether this test binary has it: an
/// example built here is built with the same ones (a feature missing from
/// this list is off in that build).
const FEATURES: &[(&str, bool)] = &[
    ("default", cfg!(feature = "default")),
    ("metrics", cfg!(feature = "metrics")),
    ("tracing", cfg!(feature = "tracing")),
    ("tokio", cfg!(feature = "tokio")),
    ("tower", cfg!(feature = "tower")),
    ("redis", cfg!(feature = "redis")),
    ("postgres", cfg!(feature = "postgres")),
    ("tls", cfg!(feature = "tls")),
    ("testing", cfg!(feature = "testing")),
    ("conformance", cfg!(feature = "conformance")),
    ("messaging", cfg!(feature = "messaging")),
    ("webhooks", cfg!(feature = "webhooks")),
    ("client", cfg!(feature = "client")),
];

/// The binary of example `name`, built (if cargo finds it stale) the first
/// time this process asks for it.
pub fn example(name: &str) -> PathBuf {
    // The tests that need an example start together: one build at a time,
    // and one a name.
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    let target = Target::of_this_binary();
    if !built.iter().any(|done| done == name) {
        target.build(name);
        built.push(name.to_owned());
    }
    let path = target.profile_dir.join("examples").join(name);
    assert!(path.is_file(), "`cargo build --example {name}` left no {}", path.display());
    path
}

/// Whether cargo sets variable `name` for a test it runs (as for the
/// crate it compiles), beside those of the command that ran it.
fn set_for_the_test(name: &str) -> bool {
    const SET: [&str; 6] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "OUT_DIR",
        "CARGO_TARGET_TMPDIR",
    ];
    SET.contains(&name) || name.starts_with("CARGO_PKG_") || name.starts_with("CARGO_BIN_")
}

/// Where cargo put this test binary: `<target dir>/[<triple>/]<profile>/deps/`.
struct Target {
    dir: PathBuf,
    triple: Option<String>,
    profile_dir: PathBuf,
}

impl Target {
    fn of_this_binary() -> Target {
        let exe = std::env::current_exe().expect("test binary");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf();
        let above = profile_dir.parent().expect("the target directory");
        // Cargo marks the top of its target directory with CACHEDIR.TAG;
        // under `--target TRIPLE` the profiles are one level further down.
        if above.join("CACHEDIR.TAG").exists() {
            return Target { dir: above.to_path_buf(), triple: None, profile_dir };
        }
        let triple = above.file_name().and_then(|name| name.to_str()).map(str::to_owned);
        Target { dir: above.parent().expect("the target directory").to_path_buf(), triple, profile_dir }
    }

    /// `--profile` for this test binary's profile directory.
    fn profile(&self) -> String {
        match self.profile_dir.file_name().and_then(|name| name.to_str()).expect("a profile directory") {
            "debug" => "dev".to_owned(),
            other => other.to_owned(),
        }
    }

    /// `cargo build --example name`, in this binary's target directory,
    /// profile and features. With every feature, for the whole workspace,
    /// as `bash .ci/test` builds the tests and examples: the same build,
    /// which finds them fresh.
    fn build(&self, name: &str) {
        let features: Vec<&str> = FEATURES.iter().filter(|(_, on)| *on).map(|(feature, _)| *feature).collect();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command.args(["build", "--quiet", "--example", name, "--profile", &self.profile()]);
        if features.len() == FEATURES.len() {
            command.args(["--workspace", "--all-features"]);
        } else {
            command.args(["-p", "idemkv", "--no-default-features", "--features", &features.join(",")]);
        }
        command.arg("--manifest-path").arg(Path::new(PACKAGE).join("Cargo.toml"));
        if let Some(triple) = &self.triple {
            command.args(["--target", triple]);
        }
        // What cargo set for this test's run and not for the command that
        // ran it: left set, it would differ from that command's (a build
        // script that watches one, as ring's watches CARGO_MANIFEST_DIR,
        // would run again, and each build undo the other's).
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(set_for_the_test) {
                command.env_remove(name);
            }
        }
        let output = command.env("CARGO_TARGET_DIR", &self.dir).output().expect("run cargo");
        assert!(
            output.status.success(),
            "building example {name} failed ({command:?}):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
