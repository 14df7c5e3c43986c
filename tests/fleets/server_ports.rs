//! The server fixtures' ports: a port chosen free can be taken by another
//! process before the server starts on it (a Redis or PostgreSQL server
//! then starts on another), and a Redis Cluster node's bus port is one of
//! its own, not Redis's port + 10000 (out of range above 55535, or held by
//! a connection of another process).

#[cfg(feature = "redis")]
use crate::common::redis::{RedisCluster, RedisServer};
use std::net::TcpListener;

#[cfg(feature = "redis")]
#[test]
fn a_server_whose_port_was_taken_starts_on_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port();
    let server = RedisServer::start_with(dir.path(), port, &[]);
    assert_ne!(server.port, port, "the server took a port a listener holds");
    assert_eq!(server.cli(&["ping"]).as_deref().map(str::trim), Some("PONG"));
    drop(taken);
}

#[cfg(feature = "redis")]
#[test]
fn a_cluster_nodes_bus_port_is_its_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = RedisCluster::start(dir.path());
    for node in &cluster.nodes {
        let bus = node.cli(&["config", "get", "cluster-port"]).expect("CONFIG GET");
        let bus: u16 = bus.lines().nth(1).expect("a value").trim().parse().expect("a port");
        assert_ne!(bus, 0, "node {}: no bus port of its own", node.port);
        assert_ne!(u32::from(bus), u32::from(node.port) + 10_000);
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_postgres_server_whose_port_was_taken_starts_on_another() {
    use idemkv::backend::postgres::tokio_postgres;
    let dir = tempfile::tempdir().expect("tempdir");
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port();
    let server = crate::common::postgres::PostgresServer::start_empty_on(dir.path(), port);
    assert_ne!(server.port, port, "the server took a port a listener holds");
    let (client, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(connection);
    let one: i32 = client.query_one("SELECT 1", &[]).await.expect("SELECT 1").get(0);
    assert_eq!(one, 1);
    drop(taken);
}
