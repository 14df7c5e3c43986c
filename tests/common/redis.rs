//! Real Redis servers for the tests, started here from the `redis-server`
//! on the PATH (`bash .ci/test` installs Debian's package), on loopback ports
//! chosen free, in a temporary directory, with AOF (`appendfsync always`),
//! and killed when their handle drops.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free loopback port (bound, then released for the server to take).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port()
}

/// One `redis-server` process.
pub struct RedisServer {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
    /// A Cluster node's bus port (`--cluster-port`), chosen free as its
    /// port is, rather than Redis's port + 10000, which may be out of range
    /// or held by another process's connection.
    bus_port: Option<u16>,
}

fn redis_server() -> &'static str {
    let found = Command::new("redis-server").arg("--version").output().is_ok_and(|output| output.status.success());
    assert!(found, "redis-server is not on the PATH: `bash .ci/servers` installs it");
    "redis-server"
}

impl RedisServer {
    /// A standalone server with AOF in `dir` (created if missing).
    pub fn start(dir: &Path) -> RedisServer {
        RedisServer::start_with(dir, free_port(), &[])
    }

    /// A server on `port` with `extra` arguments. A free port can be taken
    /// by another process between its choice and the server's start: a
    /// server that exits before it answers is started again on other free
    /// ports, at most four times more.
    pub fn start_with(dir: &Path, port: u16, extra: &[&str]) -> RedisServer {
        RedisServer::start_on(dir, port, None, extra)
    }

    /// A Cluster node (`--cluster-enabled yes`) with a bus port of its own.
    fn start_node(dir: &Path) -> RedisServer {
        let extra = ["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"];
        RedisServer::start_on(dir, free_port(), Some(free_port()), &extra)
    }

    fn start_on(dir: &Path, port: u16, bus_port: Option<u16>, extra: &[&str]) -> RedisServer {
        std::fs::create_dir_all(dir).expect("server dir");
        let mut server = RedisServer {
            port,
            dir: dir.to_path_buf(),
            child: None,
            extra: extra.iter().map(ToString::to_string).collect(),
            bus_port,
        };
        let start = |server: &mut RedisServer| {
            server.spawn();
            server.wait_ready()
        };
        let elsewhere = |server: &mut RedisServer| {
            server.port = free_port();
            server.bus_port = server.bus_port.map(|_| free_port());
        };
        super::server_start::on_free_ports(&mut server, start, elsewhere);
        server
    }

    /// Starts the server again (after [`kill`](RedisServer::kill)) on the
    /// same port and directory: it loads its AOF.
    pub fn restart(&mut self) {
        self.spawn();
        if let Err(exited) = self.wait_ready() {
            panic!("{exited}");
        }
    }

    fn spawn(&mut self) {
        let mut command = Command::new(redis_server());
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--maxmemory-policy", "noeviction"])
            .args(["--dir", self.dir.to_str().expect("utf-8 dir"), "--daemonize", "no", "--logfile", "server.log"])
            .args(&self.extra);
        if let Some(bus_port) = self.bus_port {
            command.args(["--cluster-port", &bus_port.to_string()]);
        }
        let child = command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
        self.child = Some(child.expect("start redis-server"));
    }

    /// Waits until the server answers `PING`; `Err` saying how it ended
    /// (with its log's last lines) when it exited first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if self.answers() {
                return Ok(());
            }
            let child = self.child.as_mut().expect("spawned");
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return Err(super::server_start::exited(
                    "redis-server",
                    self.port,
                    status,
                    &self.dir.join("server.log"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not answer within 20 s (see {}/server.log)", self.port, self.dir.display());
    }

    /// Whether this server answers `PING` with `PONG` (its data loaded) on
    /// its port, asked over a connection with a short timeout, and is the
    /// process that answers there: another process's listener on the port
    /// answers otherwise, or never.
    fn answers(&self) -> bool {
        let Some(child) = &self.child else { return false };
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut stream) = TcpStream::connect_timeout(&address, Duration::from_millis(500)) else { return false };
        if stream.set_read_timeout(Some(Duration::from_millis(500))).is_err()
            || stream.write_all(b"PING\r\nINFO server\r\n").is_err()
        {
            return false;
        }
        // `+PONG`, then `INFO`'s bulk string (`$length`, the text).
        let mut reply = Vec::new();
        let mut buffer = [0_u8; 4096];
        let complete = |reply: &[u8]| {
            let text = String::from_utf8_lossy(reply);
            let info = text.strip_prefix("+PONG\r\n$")?;
            let (length, body) = info.split_once("\r\n")?;
            let length: usize = length.parse().ok()?;
            (body.len() >= length).then(|| body.contains(&format!("\nprocess_id:{}\r", child.id())))
        };
        while reply.len() < 65_536 && (reply.is_empty() || reply.starts_with(b"+PONG")) {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => return false,
                Ok(read) => reply.extend_from_slice(&buffer[..read]),
            }
            if let Some(ours) = complete(&reply) {
                return ours;
            }
        }
        false
    }

    /// Runs `redis-cli` against this server; its output, `None` on failure.
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .ok()?;
        output.status.success().then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// How many times the server ran `command` since the last reset
    /// (`INFO commandstats`; calls refused, such as a script's `NOSCRIPT`
    /// before it is loaded, not counted).
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]).expect("INFO");
        let prefix = format!("cmdstat_{command}:");
        let Some(fields) = stats.lines().find_map(|line| line.trim().strip_prefix(&prefix)) else {
            return 0;
        };
        let field = |name: &str| -> u64 {
            fields
                .split(',')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .map_or(0, |value| value.parse().expect("a number"))
        };
        field("calls") - field("rejected_calls") - field("failed_calls")
    }

    /// The URL clients use.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: no shutdown, no last write.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl RedisServer {
    /// A replica of `primary` (`--replicaof`), returned once its link to
    /// the primary is up and the initial sync done.
    pub fn start_replica(dir: &Path, primary: &RedisServer) -> RedisServer {
        RedisServer::start_replica_with(dir, primary, &[])
    }

    /// [`start_replica`](RedisServer::start_replica) with `extra` arguments.
    pub fn start_replica_with(dir: &Path, primary: &RedisServer, extra: &[&str]) -> RedisServer {
        let port = primary.port.to_string();
        let mut arguments = vec!["--replicaof", "127.0.0.1", &port];
        arguments.extend_from_slice(extra);
        let replica = RedisServer::start_with(dir, free_port(), &arguments);
        replica.wait_for("info replication", "master_link_status:up");
        replica
    }

    /// Waits (at most 20 s) until `redis-cli command` answers with `needle`.
    pub fn wait_for(&self, command: &str, needle: &str) {
        let args: Vec<&str> = command.split(' ').collect();
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if self.cli(&args).is_some_and(|answer| answer.contains(needle)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {}: `{command}` never answered {needle}", self.port);
    }

    /// Makes this replica a primary (`REPLICAOF NO ONE`), as a failover does.
    pub fn promote(&self) {
        assert_eq!(self.cli(&["replicaof", "no", "one"]).as_deref().map(str::trim), Some("OK"));
        self.wait_for("info replication", "role:master");
    }

    /// Sends `signal` (`STOP`, `CONT`) to the server process: a stopped
    /// server holds its connections but reads and answers nothing, as a
    /// replica behind a stalled link.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let sent = Command::new("kill").args([&format!("-{signal}"), &pid]).status().expect("kill");
        assert!(sent.success(), "kill -{signal} {pid}");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Cluster of three masters, no replicas, on loopback.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start(dir: &Path) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3).map(|n| RedisServer::start_node(&dir.join(format!("node-{n}")))).collect();
        let addresses: Vec<String> = nodes.iter().map(|node| format!("127.0.0.1:{}", node.port)).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli --cluster create");
        assert!(created.success(), "redis-cli --cluster create failed");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            let ready = nodes
                .iter()
                .all(|node| node.cli(&["cluster", "info"]).is_some_and(|info| info.contains("cluster_state:ok")));
            if ready {
                return RedisCluster { nodes };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the cluster did not reach cluster_state:ok within 30 s");
    }

    /// [`RedisCluster::start`] from async code: its start blocks, so it
    /// runs on a blocking thread.
    pub async fn start_async(dir: &Path) -> RedisCluster {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || RedisCluster::start(&dir)).await.expect("cluster")
    }

    /// The URLs of its nodes.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A backend on this Cluster with `config`: the connect's own answer.
    pub async fn connect(&self, config: idemkv::Config) -> Result<idemkv::backend::redis::RedisBackend, idemkv::Error> {
        let urls = self.urls();
        let nodes: Vec<&str> = urls.iter().map(String::as_str).collect();
        idemkv::backend::redis::RedisBackend::connect_cluster(&nodes, config).await
    }
}
