//! A real PostgreSQL server for the tests, started here from the `initdb`,
//! `postgres` and `pg_ctl` on the PATH (`bash .ci/test` installs Debian's
//! packages where they are missing): a new cluster in a temporary
//! directory, listening on a free loopback port, `fsync` and
//! `synchronous_commit` on, stopped (`pg_ctl stop -m immediate`, no
//! checkpoint: a crash) when its handle drops. PostgreSQL refuses to run
//! as root, so as root the server runs as `nobody`, in a directory of its
//! own under the system's temporary directory (see [`server_home`]).
//! [`PostgresServer::start`]
//! migrates the store into schema `public` as the superuser `postgres`
//! (the owner), as an operator does before the services connect;
//! [`PostgresServer::start_empty`] leaves the database as `initdb` made it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released for the server to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// One `postgres` process over its data directory.
pub struct PostgresServer {
    pub port: u16,
    /// The server's directory: its data (`data/`), log and socket.
    pub dir: PathBuf,
    child: Option<Child>,
    /// The directory made for a server run as `nobody`, removed after the
    /// server stops (fields drop after [`Drop::drop`]).
    _home: Option<tempfile::TempDir>,
}

fn id(flag: &str, user: &str) -> u32 {
    let output = Command::new("id").args([flag, user]).output().expect("id");
    String::from_utf8_lossy(&output.stdout).trim().parse().expect("a numeric id")
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// Where a server asked for in `dir` lives: `dir` itself (created if
/// missing), or, as root, a new directory under the system's temporary
/// directory, owned by `nobody`. The server then runs as `nobody`, who
/// cannot always reach `dir`: a root user's clone under `/root` (mode
/// 0700) puts the tests' directories, `CARGO_TARGET_TMPDIR` among them,
/// out of its reach. The temporary directory must be one every user can
/// enter (`/tmp`, unless `TMPDIR` says otherwise).
fn server_home(dir: &Path) -> (PathBuf, Option<tempfile::TempDir>) {
    if !is_root() {
        std::fs::create_dir_all(dir).expect("server dir");
        return (dir.to_path_buf(), None);
    }
    let home = tempfile::Builder::new().prefix("idemkv-postgres-").tempdir().expect("a temporary directory");
    std::os::unix::fs::chown(home.path(), Some(id("-u", "nobody")), Some(id("-g", "nobody"))).expect("chown");
    (home.path().to_path_buf(), Some(home))
}

/// `program` run as `nobody` when we are root (PostgreSQL refuses root).
fn as_server_user(program: &str) -> Command {
    if is_root() {
        let mut command = Command::new("setpriv");
        command.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", program]);
        command
    } else {
        Command::new(program)
    }
}

impl PostgresServer {
    /// A new cluster in `dir/data` (see [`server_home`] for where it is as
    /// root), started, the store migrated into schema `public`.
    pub fn start(dir: &Path) -> PostgresServer {
        let server = PostgresServer::start_empty(dir);
        server.migrate(idemkv::backend::postgres::SCHEMA_DEFAULT);
        server
    }

    /// Migrates the store into `schema` as the superuser (on a thread of
    /// its own: callers may be inside a runtime already).
    pub fn migrate(&self, schema: &str) -> idemkv::backend::postgres::Migration {
        let (url, schema) = (self.url(), schema.to_owned());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let options = idemkv::backend::postgres::PostgresOptions::new().schema(&schema);
            runtime.block_on(idemkv::backend::postgres::PostgresBackend::migrate(&url, &options)).expect("migrate")
        })
        .join()
        .expect("the migration thread")
    }

    /// A new cluster in `dir/data` (see [`server_home`] for where it is as
    /// root), started, with no store in it.
    pub fn start_empty(dir: &Path) -> PostgresServer {
        PostgresServer::start_empty_on(dir, free_port())
    }

    /// [`start_empty`](PostgresServer::start_empty) on `port`. A free port
    /// can be taken by another process between its choice and the
    /// server's start: a server that exits before it is ready is started
    /// again on other free ports, at most four times more.
    pub fn start_empty_on(dir: &Path, port: u16) -> PostgresServer {
        let (dir, home) = server_home(dir);
        let data = dir.join("data");
        let initdb = as_server_user("initdb")
            .args(["-D", data.to_str().expect("utf-8 dir"), "-U", "postgres", "-A", "trust", "-E", "UTF8"])
            .args(["--no-sync", "--no-instructions"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("initdb is not on the PATH: `bash .ci/servers` installs PostgreSQL and prints its bin folder");
        let need = if is_root() { " (run as nobody, who must be able to enter every directory above it)" } else { "" };
        assert!(initdb.success(), "initdb failed in {}{need}", data.display());
        let mut server = PostgresServer { port, dir, child: None, _home: home };
        let start = |server: &mut PostgresServer| {
            server.spawn();
            server.wait_ready()
        };
        super::server_start::on_free_ports(&mut server, start, |server| server.port = free_port());
        server
    }

    /// A new cluster that takes TCP connections over TLS only
    /// (`hostssl` in `pg_hba.conf`), with the server certificate
    /// `cert_pem` and its key `key_pem`.
    pub fn start_tls(dir: &Path, cert_pem: &str, key_pem: &str) -> PostgresServer {
        let mut server = PostgresServer::start(dir);
        server.stop_immediate();
        let data = server.data();
        let own = |path: &Path, contents: &str, mode: u32| {
            std::fs::write(path, contents).expect("write");
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).expect("chmod");
            if is_root() {
                std::os::unix::fs::chown(path, Some(id("-u", "nobody")), Some(id("-g", "nobody"))).expect("chown");
            }
        };
        own(&data.join("server.crt"), cert_pem, 0o600);
        own(&data.join("server.key"), key_pem, 0o600);
        let conf = std::fs::read_to_string(data.join("postgresql.conf")).expect("postgresql.conf");
        own(
            &data.join("postgresql.conf"),
            &format!("{conf}\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"),
            0o600,
        );
        own(&data.join("pg_hba.conf"), "local all all trust\nhostssl all all 127.0.0.1/32 trust\n", 0o600);
        server.restart();
        server
    }

    /// Starts the server (again, after [`stop_immediate`]) on the same
    /// port and data directory: after an immediate stop it recovers from
    /// its WAL.
    ///
    /// [`stop_immediate`]: PostgresServer::stop_immediate
    pub fn restart(&mut self) {
        self.spawn();
        if let Err(exited) = self.wait_ready() {
            panic!("{exited}");
        }
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.join("server.log")).expect("log file");
        let child = as_server_user("postgres")
            .args(["-D", self.data().to_str().expect("utf-8 dir"), "-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-k", self.dir.to_str().expect("utf-8 dir")])
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        self.child = Some(child);
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Ready when `postmaster.pid` says so (what `pg_ctl -w` waits for)
    /// and the port takes connections; `Err` saying how it ended (with its
    /// log's last lines) when it exited first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            let pid_file = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap_or_default();
            let ready = pid_file.lines().nth(7).is_some_and(|status| status.trim() == "ready");
            if ready && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            let child = self.child.as_mut().expect("spawned");
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return Err(super::server_start::exited("postgres", self.port, status, &self.dir.join("server.log")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("postgres on port {} was not ready within 30 s (see {}/server.log)", self.port, self.dir.display());
    }

    /// The URL clients use (the superuser `postgres`).
    pub fn url(&self) -> String {
        self.url_as("postgres")
    }

    /// The URL of `role` (password-less: the cluster trusts loopback).
    pub fn url_as(&self, role: &str) -> String {
        format!("postgres://{role}@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl stop -m immediate`: every server process quits at once, no
    /// checkpoint, as at a crash; the next start replays the WAL.
    pub fn stop_immediate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let stopped = as_server_user("pg_ctl")
                .args(["stop", "-D", self.data().to_str().expect("utf-8 dir"), "-m", "immediate", "-w"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !stopped.is_ok_and(|status| status.success()) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop_immediate();
    }
}
