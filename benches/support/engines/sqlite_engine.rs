//! `SQLite` through rusqlite (bundled, WAL, `INSERT .. ON CONFLICT`,
//! synchronous=OFF when buffered, FULL when durable).

use super::{key, Answer, Engine, FINGERPRINT, PRELOADED, RESPONSE};
use parking_lot::Mutex;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
pub(super) struct Sqlite {
    connection: Mutex<rusqlite::Connection>,
    next_token: AtomicU64,
}

impl Sqlite {
    pub(super) fn open(dir: &Path, sync: bool) -> Self {
        let connection = rusqlite::Connection::open(dir.join("sqlite.db")).expect("sqlite");
        let synchronous = if sync { "FULL" } else { "OFF" };
        connection
            .execute_batch(&format!(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous={synchronous};
                 CREATE TABLE IF NOT EXISTS keys (k BLOB PRIMARY KEY, state INTEGER NOT NULL,
                   fp BLOB NOT NULL, token INTEGER NOT NULL, response BLOB) WITHOUT ROWID;"
            ))
            .expect("schema");
        Sqlite { connection: Mutex::new(connection), next_token: AtomicU64::new(1 << 40) }
    }
}

impl Engine for Sqlite {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let connection = self.connection.lock();
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let inserted = connection
            .prepare_cached("INSERT INTO keys (k, state, fp, token) VALUES (?1, 1, ?2, ?3) ON CONFLICT(k) DO NOTHING")
            .expect("prepare")
            .execute(rusqlite::params![key, &fingerprint[..], token.cast_signed()])
            .expect("insert");
        if inserted == 1 {
            return Answer::Acquired(token);
        }
        let mut select =
            connection.prepare_cached("SELECT state, fp, response FROM keys WHERE k = ?1").expect("prepare");
        select
            .query_row([key], |row| {
                let state: i64 = row.get(0)?;
                let stored: Vec<u8> = row.get(1)?;
                let response: Option<Vec<u8>> = row.get(2)?;
                Ok(if stored != fingerprint[..] {
                    Answer::Mismatch
                } else if state == 2 {
                    assert!(response.is_some_and(|response| !response.is_empty()));
                    Answer::Replay
                } else {
                    Answer::InProgress
                })
            })
            .expect("select")
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let connection = self.connection.lock();
        let updated = connection
            .prepare_cached("UPDATE keys SET state = 2, response = ?2 WHERE k = ?1 AND token = ?3")
            .expect("prepare")
            .execute(rusqlite::params![key, response, token.cast_signed()])
            .expect("update");
        assert_eq!(updated, 1);
    }

    /// Completed rows inserted 10,000 to a transaction.
    fn preload(&self, count: u64) {
        let mut connection = self.connection.lock();
        for start in (0..count).step_by(10_000) {
            let transaction = connection.transaction().expect("begin");
            {
                let mut insert = transaction
                    .prepare_cached("INSERT INTO keys (k, state, fp, token, response) VALUES (?1, 2, ?2, ?3, ?4)")
                    .expect("prepare");
                for n in start..count.min(start + 10_000) {
                    let params = rusqlite::params![
                        &key(PRELOADED, n)[..],
                        &FINGERPRINT[..],
                        (n + 1).cast_signed(),
                        &RESPONSE[..]
                    ];
                    insert.execute(params).expect("insert");
                }
            }
            transaction.commit().expect("commit");
        }
    }

    fn records(&self) -> u64 {
        let count: i64 =
            self.connection.lock().query_row("SELECT count(*) FROM keys", [], |row| row.get(0)).expect("count");
        count.cast_unsigned()
    }
}
