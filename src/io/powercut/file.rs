//! An open file of the simulated disk.

use super::{finish, in_memory, read_only, DataChange, Disk, FileId, StorageFile};
use parking_lot::Mutex;
use std::fmt;
use std::io;
use std::sync::Arc;

/// An open file of a [`PowerCutStorage`](super::PowerCutStorage), valid for
/// the boot it was opened in.
pub(super) struct PowerCutFile {
    pub(super) disk: Arc<Mutex<Disk>>,
    pub(super) id: FileId,
    pub(super) epoch: u64,
}

impl fmt::Debug for PowerCutFile {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("PowerCutFile").field("id", &self.id).field("boot", &self.epoch).finish_non_exhaustive()
    }
}

impl PowerCutFile {
    /// Records a change of the file's bytes or length in its volatile image.
    fn change(&self, change: DataChange) -> io::Result<()> {
        let mut disk = self.disk.lock();
        let admit = disk.admit(self.epoch)?;
        let file = disk.file(self.id);
        change.apply(&mut file.volatile);
        file.unsynced.push(change);
        finish(admit, ())
    }
}

impl StorageFile for PowerCutFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut disk = self.disk.lock();
        read_only(disk.admit(self.epoch)?)?;
        let volatile = &disk.file(self.id).volatile;
        let start = usize::try_from(offset).ok().filter(|start| *start <= volatile.len());
        let end = start.and_then(|start| start.checked_add(buf.len())).filter(|end| *end <= volatile.len());
        match (start, end) {
            (Some(start), Some(end)) => {
                buf.copy_from_slice(&volatile[start..end]);
                Ok(())
            }
            _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file")),
        }
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let (offset, _) = in_memory(offset, buf.len())?;
        self.change(DataChange::Write { offset, bytes: buf.to_vec() })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let (len, _) = in_memory(len, 0)?;
        self.change(DataChange::SetLen(len))
    }

    fn len(&self) -> io::Result<u64> {
        let mut disk = self.disk.lock();
        read_only(disk.admit(self.epoch)?)?;
        Ok(disk.file(self.id).volatile.len() as u64)
    }

    fn sync(&self) -> io::Result<()> {
        let mut disk = self.disk.lock();
        read_only(disk.admit(self.epoch)?)?;
        let file = disk.file(self.id);
        for change in std::mem::take(&mut file.unsynced) {
            change.apply(&mut file.durable);
        }
        debug_assert_eq!(file.durable.len(), file.volatile.len());
        Ok(())
    }

    /// A disk in memory, never full: a store under `Sync` stages its
    /// records here as on ext4, so that the power-cut tests cut through
    /// its batches' writes.
    fn overwrites_in_place(&self) -> bool {
        true
    }
}
