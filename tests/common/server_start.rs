//! Starting a test server on ports chosen free. A port chosen free (bound,
//! then released) can be taken by another process before the server
//! starts on it; the server then exits before it is ready, and is started
//! again on other free ports. The Redis and PostgreSQL fixtures
//! (`redis.rs`, `postgres.rs`) call it as their sibling module
//! (`super::server_start`), in the tests and in the benches that include
//! them.

use std::path::Path;
use std::process::ExitStatus;

/// Starts `server` with `start`, at most five times: `start` says how the
/// server exited before it was ready (`Err`), and `elsewhere` moves it to
/// other free ports before the next try.
pub fn on_free_ports<S>(
    server: &mut S,
    mut start: impl FnMut(&mut S) -> Result<(), String>,
    mut elsewhere: impl FnMut(&mut S),
) {
    let mut attempts = 1;
    loop {
        match start(server) {
            Ok(()) => return,
            Err(exited) if attempts < 5 => {
                eprintln!("{exited}; again on other ports");
                elsewhere(server);
                attempts += 1;
            }
            Err(exited) => panic!("{exited}, five times"),
        }
    }
}

/// How server `name` on `port` exited before it was ready: its status and
/// its log's last lines (a port another process took, a bad setting).
pub fn exited(name: &str, port: u16, status: ExitStatus, log: &Path) -> String {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    let mut tail: Vec<&str> = log.lines().rev().take(3).collect();
    tail.reverse();
    format!("{name} on port {port} exited ({status}) before it was ready: {tail:?}")
}
