//! The writing side: a [`HintBuilder`] collects the entries of one segment
//! as its frames are appended (or copied by a compaction, or replayed at
//! open), encoded as they come, and writes the hint file when the segment
//! is sealed, rewritten or closed.

use super::{
    block_crc, hint_path, temp_path, Deltas, HintEntry, HintHeader, BLOCK_HEADER_BYTES, BLOCK_PAYLOAD_MAX,
    ENTRY_BYTES_MAX,
};
use crate::engine::frame::read_u32;
use crate::engine::segment::header::HEADER_BYTES;
use crate::error::{Error, Result};
use crate::events::event;
use crate::io::{Storage, StorageFile};
use crate::record::Kind;
use std::path::Path;

/// Encoded bytes a builder keeps at most (about 25 bytes a frame): a
/// segment of more frames gets no hint and is replayed from the log.
pub(crate) const BUILDER_BYTES_MAX: usize = 32 << 20;

/// The entries of one segment so far, encoded, in blocks.
#[derive(Debug)]
pub(crate) struct HintBuilder {
    shard: u32,
    segment: u32,
    lsn_floor: u64,
    /// Whole blocks, then the open one; CRC fields are filled at write.
    bytes: Vec<u8>,
    /// Where the open block starts in `bytes`.
    open_block: Option<usize>,
    block_entries: u32,
    frames: u64,
    keys: u64,
    tombstones: u64,
    /// The offset after the last frame: where the next one must start.
    end: u64,
    last_lsn: u64,
    last_len: u64,
    max_updated_ms: u64,
    deltas: Deltas,
    /// Why this segment gets no hint: collecting is off (a read-only open),
    /// a frame came out of order, or the builder is full.
    given_up: Option<&'static str>,
}

impl HintBuilder {
    /// An empty builder for segment `segment` of shard `shard`.
    pub(crate) fn new(shard: u32, segment: u32, lsn_floor: u64) -> Self {
        HintBuilder {
            shard,
            segment,
            lsn_floor,
            bytes: Vec::new(),
            open_block: None,
            block_entries: 0,
            frames: 0,
            keys: 0,
            tombstones: 0,
            end: HEADER_BYTES as u64,
            last_lsn: lsn_floor,
            last_len: 0,
            max_updated_ms: 0,
            deltas: Deltas::new(lsn_floor),
            given_up: None,
        }
    }

    /// A builder that collects nothing (a read-only open writes no hint).
    pub(crate) fn off() -> Self {
        let mut builder = HintBuilder::new(0, 0, 0);
        builder.give_up("hints are off for this segment");
        builder
    }

    fn give_up(&mut self, reason: &'static str) {
        self.given_up.get_or_insert(reason);
        self.bytes = Vec::new();
        self.open_block = None;
    }

    /// Adds the frame `entry`, written at `updated_ms`; `new_key` counts it
    /// in the estimate of keys the segment brings into the index.
    #[inline]
    pub(crate) fn push(&mut self, entry: &HintEntry, updated_ms: u64, new_key: bool) {
        if self.given_up.is_none() {
            self.push_collecting(entry, updated_ms, new_key);
        }
    }

    fn push_collecting(&mut self, entry: &HintEntry, updated_ms: u64, new_key: bool) {
        if entry.offset != self.end || entry.lsn < self.last_lsn {
            self.give_up("a frame out of order");
            return;
        }
        if self.bytes.len() + ENTRY_BYTES_MAX + BLOCK_HEADER_BYTES > BUILDER_BYTES_MAX {
            self.give_up("too many frames for a hint");
            return;
        }
        let start = match self.open_block {
            Some(start) if self.bytes.len() - start - BLOCK_HEADER_BYTES + ENTRY_BYTES_MAX <= BLOCK_PAYLOAD_MAX => {
                start
            }
            _ => {
                self.close_block();
                let start = self.bytes.len();
                self.bytes.extend_from_slice(&[0; BLOCK_HEADER_BYTES]);
                self.open_block = Some(start);
                start
            }
        };
        debug_assert!(start < self.bytes.len());
        self.deltas.encode(entry, &mut self.bytes);
        self.block_entries += 1;
        self.frames += 1;
        self.keys += u64::from(new_key);
        self.tombstones += u64::from(entry.kind == Kind::Tombstone);
        self.end = entry.offset + entry.len;
        self.last_lsn = entry.lsn;
        self.last_len = entry.len;
        self.max_updated_ms = self.max_updated_ms.max(updated_ms);
    }

    /// Whether it is still collecting: it has not given up.
    pub(crate) fn is_collecting(&self) -> bool {
        self.given_up.is_none()
    }

    /// Raises the newest `updated_ms` to `updated_ms` (of frames added from
    /// a hint, which keeps only the newest).
    pub(crate) fn raise_updated(&mut self, updated_ms: u64) {
        self.max_updated_ms = self.max_updated_ms.max(updated_ms);
    }

    /// Writes the open block's length and count.
    fn close_block(&mut self) {
        if let Some(start) = self.open_block.take() {
            let payload = self.bytes.len() - start - BLOCK_HEADER_BYTES;
            let payload = u32::try_from(payload).expect("a block is at most 64 KiB");
            self.bytes[start..start + 4].copy_from_slice(&payload.to_le_bytes());
            self.bytes[start + 4..start + 8].copy_from_slice(&self.block_entries.to_le_bytes());
            self.block_entries = 0;
        }
    }

    /// Writes the hint of the frames added so far, which must be the
    /// segment `file` up to `end`, into folder `dir` (temporary file and
    /// rename; see the module docs for why nothing is synced).
    ///
    /// # Errors
    /// Why there is no hint: the builder gave up, disagrees with the
    /// segment's last frame, or an I/O error.
    pub(crate) fn write(&mut self, storage: &dyn Storage, dir: &Path, file: &dyn StorageFile, end: u64) -> Result<()> {
        let path = hint_path(dir, self.segment);
        if let Some(reason) = self.given_up {
            return Err(Error::corruption(&path, 0, reason));
        }
        if end != self.end {
            return Err(Error::corruption(&path, 0, "the hint's frames end elsewhere than the segment"));
        }
        self.close_block();
        let last_crc = self.last_crc(file).map_err(|reason| Error::corruption(&path, 0, reason))?;
        let header = HintHeader {
            shard: self.shard,
            segment: self.segment,
            lsn_floor: self.lsn_floor,
            end: self.end,
            frames: self.frames,
            keys: self.keys,
            tombstones: self.tombstones,
            last_lsn: self.last_lsn,
            max_updated_ms: self.max_updated_ms,
            last_len: u32::try_from(self.last_len).map_err(|_| Error::corruption(&path, 0, "frame beyond 4 GiB"))?,
            last_crc,
        }
        .encode();
        let header_crc = read_u32(&header, super::OFFSET_CRC);
        let mut at = 0;
        while at < self.bytes.len() {
            let payload = read_u32(&self.bytes, at) as usize;
            let body = at + BLOCK_HEADER_BYTES;
            let crc = block_crc(header_crc, &self.bytes[at..at + 8], &self.bytes[body..body + payload]);
            self.bytes[at + 8..body].copy_from_slice(&crc.to_le_bytes());
            at = body + payload;
        }
        let temp = temp_path(dir, self.segment);
        let written = storage.open(&temp, true).and_then(|hint| {
            hint.set_len(0)?;
            hint.write_all_at(&header, 0)?;
            hint.write_all_at(&self.bytes, header.len() as u64)
        });
        if let Err(error) = written.and_then(|()| storage.rename(&temp, &path)) {
            let _removed_here_or_at_open = storage.remove_file(&temp);
            return Err(Error::io("write hint", &path, error));
        }
        Ok(())
    }

    /// The stored CRC of the last frame added, read back from the segment
    /// and checked to be that frame, whole.
    fn last_crc(&self, file: &dyn StorageFile) -> std::result::Result<u32, &'static str> {
        if self.frames == 0 {
            return Ok(0);
        }
        let facts = super::reader::read_frame_at(file, self.end - self.last_len, self.last_len)?;
        if facts.lsn != self.last_lsn {
            return Err("the segment's last frame is not the hint's");
        }
        Ok(facts.crc)
    }

    /// [`write`](HintBuilder::write), with a failure reported as a debug
    /// event only: a missing hint costs a replay of the log at open.
    /// Returns whether the hint was written.
    pub(crate) fn write_logged(&mut self, storage: &dyn Storage, dir: &Path, file: &dyn StorageFile, end: u64) -> bool {
        match self.write(storage, dir, file, end) {
            Ok(()) => true,
            #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
            Err(error) => {
                event!(
                    debug,
                    shard = self.shard,
                    segment = self.segment,
                    error = %error,
                    "no hint written; open replays this segment from the log"
                );
                false
            }
        }
    }
}
