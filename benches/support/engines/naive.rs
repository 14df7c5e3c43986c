//! The naive peer: `Mutex<HashMap>` plus an append-only file written per
//! mutation (length-prefixed binary records, fdatasync per mutation when
//! durable); reopening replays the whole file into the map.

use super::{Answer, Engine};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
struct NaiveRecord {
    completed: bool,
    fingerprint: [u8; 32],
    token: u64,
    response: Vec<u8>,
}

struct NaiveState {
    map: HashMap<Vec<u8>, NaiveRecord>,
    file: File,
    next_token: u64,
}

pub(super) struct Naive {
    state: Mutex<NaiveState>,
    sync: bool,
}

pub(super) const NAIVE_CLAIM: u8 = 1;
pub(super) const NAIVE_COMPLETE: u8 = 2;

/// One record at `at`: kind, key length (u16), key, fingerprint, token
/// (u64), response length (u32), response; `None` at the end or a torn tail.
#[allow(clippy::type_complexity, reason = "one record's fields, read once")]
pub(super) fn decode(bytes: &[u8], at: usize) -> Option<(u8, &[u8], [u8; 32], u64, &[u8], usize)> {
    let take = |from: usize, len: usize| bytes.get(from..from + len);
    let kind = *bytes.get(at)?;
    let key_len = usize::from(u16::from_le_bytes(take(at + 1, 2)?.try_into().ok()?));
    let key = take(at + 3, key_len)?;
    let mut cursor = at + 3 + key_len;
    let fingerprint: [u8; 32] = take(cursor, 32)?.try_into().ok()?;
    let token = u64::from_le_bytes(take(cursor + 32, 8)?.try_into().ok()?);
    let response_len = usize::try_from(u32::from_le_bytes(take(cursor + 40, 4)?.try_into().ok()?)).ok()?;
    cursor += 44;
    let response = take(cursor, response_len)?;
    Some((kind, key, fingerprint, token, response, cursor + response_len))
}

/// The record [`decode`] reads.
pub(super) fn encode(kind: u8, key: &[u8], fingerprint: &[u8; 32], token: u64, response: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(47 + key.len() + response.len());
    line.push(kind);
    line.extend_from_slice(&u16::try_from(key.len()).expect("short key").to_le_bytes());
    line.extend_from_slice(key);
    line.extend_from_slice(fingerprint);
    line.extend_from_slice(&token.to_le_bytes());
    line.extend_from_slice(&u32::try_from(response.len()).expect("small response").to_le_bytes());
    line.extend_from_slice(response);
    line
}

impl Naive {
    /// Opens the log, replaying whatever it holds into the map.
    pub(super) fn open(dir: &Path, sync: bool) -> Self {
        let path = dir.join("naive.log");
        let mut map = HashMap::new();
        let mut next_token = 1;
        if let Ok(bytes) = std::fs::read(&path) {
            let mut at = 0;
            while let Some((kind, key, fingerprint, token, response, next)) = decode(&bytes, at) {
                next_token = next_token.max(token + 1);
                if kind == NAIVE_CLAIM {
                    let record = NaiveRecord { completed: false, fingerprint, token, response: Vec::new() };
                    map.insert(key.to_vec(), record);
                } else if let Some(record) = map.get_mut(key) {
                    record.completed = true;
                    record.response = response.to_vec();
                }
                at = next;
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path).expect("open naive log");
        Naive { state: Mutex::new(NaiveState { map, file, next_token }), sync }
    }

    fn append(&self, file: &mut File, kind: u8, key: &[u8], record: &NaiveRecord) {
        let line = encode(kind, key, &record.fingerprint, record.token, &record.response);
        file.write_all(&line).expect("write");
        if self.sync {
            file.sync_data().expect("fdatasync");
        }
    }
}

impl Engine for Naive {
    fn claim(&self, key: &[u8], fingerprint: &[u8; 32]) -> Answer {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if let Some(record) = state.map.get(key) {
            return match (record.fingerprint == *fingerprint, record.completed) {
                (false, _) => Answer::Mismatch,
                (true, true) => {
                    let response = record.response.clone();
                    assert!(!response.is_empty());
                    Answer::Replay
                }
                (true, false) => Answer::InProgress,
            };
        }
        let token = state.next_token;
        state.next_token += 1;
        let record = NaiveRecord { completed: false, fingerprint: *fingerprint, token, response: Vec::new() };
        self.append(&mut state.file, NAIVE_CLAIM, key, &record);
        state.map.insert(key.to_vec(), record);
        Answer::Acquired(token)
    }

    fn complete(&self, key: &[u8], token: u64, response: &[u8]) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let record = state.map.get_mut(key).expect("claimed");
        assert_eq!(record.token, token);
        record.completed = true;
        record.response = response.to_vec();
        self.append(&mut state.file, NAIVE_COMPLETE, key, record);
    }

    fn records(&self) -> u64 {
        u64::try_from(self.state.lock().map.len()).expect("fits")
    }
}
