//! redb 2: `Durability::None` when buffered (it then survives no crash at
//! all, which flatters it), `Immediate` when durable; hits are answered
//! from a read transaction.

use super::{key, Answer, Engine, FINGERPRINT, PRELOADED, RESPONSE};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");

pub(super) struct Redb {
    db: redb::Database,
    durability: redb::Durability,
    next_token: AtomicU64,
}

/// Value layout: state (1 processing, 2 completed), fingerprint, token, response.
fn redb_value(completed: bool, fingerprint: &[u8; 32], token: u64, response: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(41 + response.len());
    value.push(if completed { 2 } else { 1 });
    value.extend_from_slice(fingerprint);
    value.extend_from_slice(&token.to_le_bytes());
    value.extend_from_slice(response);
    value
}

fn decide(value: &[u8], fingerprint: &[u8; 32]) -> Answer {
    if value[1..33] != fingerprint[..] {
        Answer::Mismatch
    } else if value[0] == 2 {
        assert!(value.len() > 41);
        Answer::Replay
    } else {
        Answer::InProgress
    }
}

impl Redb {
    pub(super) fn open(dir: &Path, sync: bool) -> Self {
        let db = redb::Database::create(dir.join("redb")).expect("redb");
        let durability = if sync { redb::Durability::Immediate } else { redb::Durability::None };
        Redb { db, durability, next_token: AtomicU64::new(1 << 40) }
    }
}

impl Engine for Redb {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        // Hits are answered from a read transaction, as a tuned service would.
        if let Ok(table) = self.db.begin_read().expect("read").open_table(TABLE) {
            if let Some(value) = table.get(key).expect("get") {
                return decide(value.value(), fingerprint);
            }
        }
        let mut transaction = self.db.begin_write().expect("write");
        transaction.set_durability(self.durability);
        let answer = {
            let mut table = transaction.open_table(TABLE).expect("table");
            let existing = table.get(key).expect("get").map(|value| decide(value.value(), fingerprint));
            if let Some(answer) = existing {
                answer
            } else {
                let token = self.next_token.fetch_add(1, Ordering::Relaxed);
                table.insert(key, redb_value(false, fingerprint, token, &[]).as_slice()).expect("insert");
                Answer::Acquired(token)
            }
        };
        transaction.commit().expect("commit");
        answer
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let mut transaction = self.db.begin_write().expect("write");
        transaction.set_durability(self.durability);
        {
            let mut table = transaction.open_table(TABLE).expect("table");
            let fingerprint: [u8; 32] = {
                let value = table.get(key).expect("get").expect("claimed");
                let value = value.value();
                assert_eq!(value[33..41], token.to_le_bytes());
                value[1..33].try_into().expect("32 bytes")
            };
            table.insert(key, redb_value(true, &fingerprint, token, response).as_slice()).expect("insert");
        }
        transaction.commit().expect("commit");
    }

    /// Completed rows written 10,000 to a durable transaction.
    fn preload(&self, count: u64) {
        for start in (0..count).step_by(10_000) {
            let transaction = self.db.begin_write().expect("write");
            {
                let mut table = transaction.open_table(TABLE).expect("table");
                for n in start..count.min(start + 10_000) {
                    let value = redb_value(true, &FINGERPRINT, n + 1, &RESPONSE);
                    table.insert(&key(PRELOADED, n)[..], value.as_slice()).expect("insert");
                }
            }
            transaction.commit().expect("commit");
        }
    }

    fn records(&self) -> u64 {
        match self.db.begin_read().expect("read").open_table(TABLE) {
            Ok(table) => table.len().expect("len"),
            Err(_) => 0,
        }
    }
}
