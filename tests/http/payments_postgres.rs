//! The payments example on PostgreSQL (`--postgres URL`), two instances on
//! one real server: the charge and the key's completion commit in one
//! transaction, so every payment is one row of `payments_charges` however
//! the retries fall; a retry to the other instance replays; the same key
//! sent to both at once is charged once; a reused key is refused.

#![cfg(all(feature = "tower", feature = "metrics", feature = "postgres"))]

use crate::common::payments::{client, pay, start, Instance};
use crate::common::postgres::PostgresServer;
use idemkv::backend::postgres::tokio_postgres::NoTls;
use std::path::Path;

fn instance(dir: &Path, url: &str) -> Instance {
    start(dir, &["--postgres", url], "PostgreSQL")
}

/// The rows of `payments_charges` whose body names `order`.
async fn charges(url: &str, order: &str) -> i64 {
    let (client, connection) = idemkv::backend::postgres::tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    let pattern = format!("%\"order\":\"{order}\"%");
    let row =
        client.query_one("SELECT count(*) FROM payments_charges WHERE body LIKE $1", &[&pattern]).await.expect("count");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_payment_is_one_row_whichever_instance_the_retry_reaches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = PostgresServer::start(&dir.path().join("postgres"));
    let url = server.url();
    let data = dir.path().join("data");
    let (a, b) = (instance(&data, &url), instance(&data, &url));
    let client = client();

    let body = r#"{"amount":10,"order":"order-1"}"#;
    let first = pay(&client, &a, "order-1", body).await;
    assert_eq!((first.0, first.1), (201, false), "{first:?}");
    assert_eq!(pay(&client, &b, "order-1", body).await, (201, true, first.2.clone()), "B replays A's answer");
    assert_eq!(pay(&client, &a, "order-1", r#"{"amount":99,"order":"order-1"}"#).await.0, 422);
    assert_eq!(charges(&url, "order-1").await, 1);

    // The same key on both instances at the same moment, 20 times.
    let pairs = (0..20).map(|index| {
        let (client, a, b) = (&client, &a, &b);
        async move {
            let (key, body) = (format!("order-x{index}"), format!(r#"{{"amount":{index},"order":"order-x{index}"}}"#));
            tokio::join!(pay(client, a, &key, &body), pay(client, b, &key, &body))
        }
    });
    let answers = futures_util::future::join_all(pairs).await;
    for (index, (from_a, from_b)) in answers.into_iter().enumerate() {
        let order = format!("order-x{index}");
        assert_eq!(charges(&url, &order).await, 1, "{order} charged once");
        let ran = [&from_a, &from_b].into_iter().filter(|answer| answer.0 == 201 && !answer.1).count();
        assert_eq!(ran, 1, "{order}: one of the two ran it: {from_a:?} {from_b:?}");
        for answer in [&from_a, &from_b] {
            assert!(matches!(answer.0, 201 | 409), "{order}: {answer:?}");
        }
    }
    drop((a, b));
}
