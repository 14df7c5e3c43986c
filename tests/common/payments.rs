//! The payments example as the tests run it: its binary (see
//! [`super::examples`]), started on a free loopback port, and a client
//! for its `POST /payments`.

use reqwest::header::HeaderValue;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The example binary (`target/<profile>/examples/payments`), built first
/// if need be.
pub fn example() -> PathBuf {
    super::examples::example("payments")
}

/// One running instance, killed when the test ends, however it ends.
pub struct Instance {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

impl Instance {
    /// Waits (a bounded time) for the process to end by itself; its exit
    /// status.
    pub fn wait_for_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(start.elapsed() < limit, "the instance did not exit within {limit:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts an instance on a free port with its directory `dir` and `args`;
/// its base URL is read from the line it prints at start, which must
/// contain `marker`.
pub fn start(dir: &Path, args: &[&str], marker: &str) -> Instance {
    start_with(dir, args, &[], marker)
}

/// [`start`] with environment variables `env` set.
pub fn start_with(dir: &Path, args: &[&str], env: &[(&str, &str)], marker: &str) -> Instance {
    let mut child = Command::new(example())
        .arg(dir)
        .arg("127.0.0.1:0")
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the example");
    let stdout = child.stdout.take().expect("stdout");
    let mut instance = Instance { child, base: String::new() };
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("the line printed at start");
    let base = line.split_whitespace().find(|word| word.starts_with("http://"));
    instance.base = base.unwrap_or_else(|| panic!("no address in {line:?}")).trim_end_matches(',').to_string();
    assert!(line.contains(marker), "{line}");
    instance
}

/// A client that ignores proxy settings.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(20)).build().expect("client")
}

/// POSTs a payment of account `acct-1`; its status, whether it was a
/// replay, and its body.
pub async fn pay(client: &reqwest::Client, instance: &Instance, key: &str, body: &str) -> (u16, bool, String) {
    let response = client
        .post(format!("{}/payments", instance.base))
        .header("x-account", "acct-1")
        .header("idempotency-key", key)
        .body(body.to_string())
        .send()
        .await
        .expect("a response");
    let replay = response.headers().get("idempotency-replay").map(HeaderValue::as_bytes) == Some(&b"true"[..]);
    (response.status().as_u16(), replay, response.text().await.expect("a body"))
}
