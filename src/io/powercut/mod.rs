//! A [`Storage`] in memory whose power can be cut: everything synced
//! survives, and a seeded choice of what was not synced survives too, whole,
//! torn, reordered or not at all — as a real disk leaves it. No real file is
//! touched, so a test can cut the power thousands of times a second and
//! replay any one cut from its seed.
//!
//! # The model
//!
//! Every file has a **durable image** (what it holds at the least after a
//! power cut) and a **volatile image** (what reads see, like the page cache
//! of a running system), with the writes and length changes made since its
//! last [`StorageFile::sync`], in order. Every directory has **durable
//! entries** and **volatile entries**, and the store keeps the namespace
//! changes (a file created, renamed or removed, a directory created) that no
//! [`Storage::sync_dir`] has made durable yet, in order.
//!
//! - `write_all_at` and `set_len` change the volatile image;
//!   [`StorageFile::sync`] makes the file's data and length durable, not its
//!   name.
//! - Creating a file, `rename`, `remove_file` and `create_dir_all` change the
//!   volatile entries. `sync_dir(dir)` makes durable every pending change in
//!   `dir` and the earlier pending changes of the same names that those
//!   build on (a rename that replaced a file needs that file's creation). A
//!   new directory's own entry is durable only when its parent is synced.
//! - Reads, lengths and listings see the volatile state.
//!
//! [`PowerCutStorage::power_cut`] then builds what the disk holds after the
//! cut, from a seed:
//!
//! - Each pending namespace change is kept or dropped; a change to a name
//!   that an earlier dropped change touched is dropped too (a journal
//!   commits in order). A rename is one change: afterwards the file has its
//!   old name or its new one, never both, never neither. A directory whose
//!   own entry is gone takes its contents with it, and a file that no
//!   surviving entry names is gone with all its data, synced or not.
//! - Each surviving file with unsynced changes gets one of four fates:
//!   none of them reached the disk; all of them did; they reached it in
//!   order up to some point, with the next write torn after a whole number
//!   of 512-byte sectors; or every sector independently holds its content
//!   as of any moment since the last sync (pages written back out of
//!   order). The length is the file's length as of some moment since the
//!   last sync, chosen apart from the data: bytes inside it that no
//!   surviving write reached read as zeros (so do the bytes an unsynced
//!   truncation cut, when the old length survives it).
//!
//! The odds are chosen per cut and per file, so every seed also has a fair
//! chance of losing nothing or everything that was not synced.
//!
//! ## What a real file system does that this models
//!
//! - ext4 (`data=ordered`) and XFS write dirty pages back at any time and in
//!   any order; a power cut leaves any subset of them, and a write in
//!   flight torn at a sector boundary (drives promise at most 512-byte or
//!   4 KiB atomic sectors; a 512-byte unit covers page-sized tearing too).
//! - A file's length is inode metadata, updated apart from its data: with
//!   delayed allocation XFS and ext4 can come back with a length that covers
//!   blocks never written, which read as zeros.
//! - A created, renamed or removed name is durable only once its directory
//!   is fsynced (`fsync(2)`: syncing a file "does not necessarily ensure that
//!   the entry in the directory containing the file has also reached disk");
//!   until then it may be lost, yet a rename is atomic. A removal that was
//!   not synced may come back after the cut.
//!
//! ## What it does not model
//!
//! - Damage to synced data: bit rot, misdirected or lost writes, latent
//!   sector errors, which `TigerBeetle`'s simulator also injects. A failing
//!   call is [`super::FaultyStorage`]'s job; a failed fsync that drops dirty
//!   pages and marks them clean (Linux's behaviour) is not modelled: here a
//!   failed call changes nothing it had not changed before it failed.
//! - The kindness of real journals: ext4 and XFS commit metadata of the
//!   whole file system in order, and a directory fsync there also commits
//!   earlier changes elsewhere. Here only the changes in the synced
//!   directory and what they build on become durable, and the other changes
//!   are kept or dropped independently (in order per name only). This is
//!   harsher than a real disk, never kinder.
//! - Renaming a directory (refused with [`io::ErrorKind::Unsupported`]),
//!   hard and symbolic links, permissions, free space (fill the disk with
//!   [`super::FaultyStorage`]), timing and concurrency inside the disk, and
//!   `..` in paths (refused). Only the directory lock file of a store lives
//!   outside [`Storage`], on the real file system.
//!
//! ## Lineage
//!
//! redb's crash tests keep a live and a durable image of a file and rebuild
//! the file a crash leaves from the durable one plus chosen unsynced
//! writes; `TigerBeetle`'s simulated storage works in sectors, keeps writes in
//! flight until they complete and lets a crash damage the sectors they
//! target, all from one seed. This module does both for a directory tree,
//! and adds directory entries that need their own sync.
//!
//! # After a cut
//!
//! A cut begins a new boot. File handles and storage clones from before it
//! fail every call with `EIO`, as the dead process's would; the clone the
//! cut was called on, and clones made from it afterwards, belong to the new
//! boot. [`PowerCutStorage::power_off_after`] plans a cut in the middle of
//! the work: the chosen call takes effect in memory only and fails, and
//! every later call fails, until [`PowerCutStorage::power_cut`] decides what
//! the disk kept.

use super::{Storage, StorageFile};
use parking_lot::{Mutex, MutexGuard};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The unit a simulated disk writes atomically: a power cut tears a write
/// only at a multiple of it.
pub const SECTOR_BYTES: usize = 512;

/// The largest file the simulated disk holds; a write or length past it
/// fails with [`io::ErrorKind::FileTooLarge`] rather than exhausting memory.
pub const FILE_BYTES_MAX: usize = 1 << 30;

/// What one power cut did, in counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PowerCut {
    /// Namespace changes not yet synced (creations, renames, removals, new
    /// directories) that survived the cut.
    pub changes_kept: u64,
    /// Namespace changes not yet synced that the cut undid.
    pub changes_dropped: u64,
    /// Files that had a name before the cut and have none after it, gone
    /// with their data.
    pub files_vanished: u64,
    /// Surviving files none of whose unsynced changes reached the disk.
    pub files_rolled_back: u64,
    /// Surviving files that kept some of their unsynced changes, or parts
    /// of them (torn or reordered writes, a length without its data).
    pub files_torn: u64,
    /// Surviving files all of whose unsynced changes reached the disk.
    pub files_whole: u64,
}

mod disk;
mod file;
#[cfg(test)]
mod tests;

use disk::{
    error, in_memory, normalize, power_failure, split, Admit, Change, DataChange, Disk, FileData, FileId, Node, Random,
};
use file::PowerCutFile;

/// A [`Storage`] in memory that keeps durable and volatile state apart and
/// can lose its power: see the [module documentation](crate::io::powercut)
/// for the model.
///
/// Clones share the disk. Every clone belongs to the boot it was made in;
/// after a [`power_cut`](PowerCutStorage::power_cut), clones and file
/// handles from an earlier boot fail every call with `EIO`.
///
/// # Examples
///
/// ```
/// use idemkv::io::{PowerCutStorage, Storage, StorageFile};
/// use std::path::Path;
///
/// let storage = PowerCutStorage::new();
/// let dir = Path::new("/data");
/// storage.create_dir_all(dir).unwrap();
/// storage.sync_dir(Path::new("/")).unwrap();
/// let file = storage.open(&dir.join("log"), true).unwrap();
/// file.write_all_at(b"synced", 0).unwrap();
/// file.sync().unwrap();
/// storage.sync_dir(dir).unwrap();
/// file.write_all_at(b" and not", 6).unwrap();
///
/// storage.power_cut(7);
/// assert!(file.len().is_err(), "a handle from before the cut");
/// let file = storage.open(&dir.join("log"), false).unwrap();
/// let mut synced = [0u8; 6];
/// file.read_exact_at(&mut synced, 0).unwrap();
/// assert_eq!(&synced, b"synced");
/// ```
pub struct PowerCutStorage {
    disk: Arc<Mutex<Disk>>,
    /// The boot this handle belongs to.
    epoch: AtomicU64,
}

impl PowerCutStorage {
    /// An empty disk with the power on: only the roots `/` and the empty
    /// path (the parent of a relative name) exist.
    #[must_use]
    pub fn new() -> Self {
        PowerCutStorage { disk: Arc::new(Mutex::new(Disk::new())), epoch: AtomicU64::new(0) }
    }

    /// Cuts the power and starts the next boot: every file and directory
    /// falls back to what was durable, plus what `seed` chooses of what was
    /// not (see the [module documentation](crate::io::powercut)). The same
    /// seed after the same calls gives the same disk. This handle, and
    /// clones made from it afterwards, belong to the new boot; other clones
    /// and every file handle from before fail with `EIO`.
    pub fn power_cut(&self, seed: u64) -> PowerCut {
        let mut disk = self.disk.lock();
        let mut random = Random(seed);
        let mut report = PowerCut::default();
        disk.settle_namespace(&mut random, &mut report);
        let survivors = disk.durable.prune();
        disk.settle_files(&survivors, &mut random, &mut report);
        disk.volatile = disk.durable.clone();
        disk.epoch += 1;
        disk.powered = true;
        disk.power_off_at = None;
        self.epoch.store(disk.epoch, Ordering::SeqCst);
        report
    }

    /// Plans a power failure in the middle of the work: after `calls` more
    /// calls succeed (0: the very next call), the next one takes effect in
    /// memory only (a write lands in the page cache, a rename in the
    /// volatile directory; a sync makes nothing durable) and fails with
    /// `EIO`, and so does every call after it until
    /// [`power_cut`](PowerCutStorage::power_cut) decides what the disk kept.
    pub fn power_off_after(&self, calls: u64) {
        let mut disk = self.disk.lock();
        disk.power_off_at = Some(disk.calls.saturating_add(calls).saturating_add(1));
    }

    /// Cancels a planned power failure that has not happened yet.
    pub fn cancel_power_off(&self) {
        let mut disk = self.disk.lock();
        if disk.powered {
            disk.power_off_at = None;
        }
    }

    /// Whether a planned power failure has happened and no cut has followed.
    #[must_use]
    pub fn powered_off(&self) -> bool {
        !self.disk.lock().powered
    }

    /// Calls made so far through every clone and file handle, failed ones
    /// included (a measure for planning
    /// [`power_off_after`](PowerCutStorage::power_off_after)).
    #[must_use]
    pub fn calls(&self) -> u64 {
        self.disk.lock().calls
    }

    fn boot(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk.lock()
    }

    fn handle(&self, id: FileId) -> Arc<dyn StorageFile> {
        Arc::new(PowerCutFile { disk: Arc::clone(&self.disk), id, epoch: self.boot() })
    }
}

impl Default for PowerCutStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for PowerCutStorage {
    /// A handle on the same disk, of the same boot as this one.
    fn clone(&self) -> Self {
        PowerCutStorage { disk: Arc::clone(&self.disk), epoch: AtomicU64::new(self.boot()) }
    }
}

impl fmt::Debug for PowerCutStorage {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let disk = self.lock();
        formatter
            .debug_struct("PowerCutStorage")
            .field("boot", &self.boot())
            .field("current_boot", &disk.epoch)
            .field("powered", &disk.powered)
            .field("files", &disk.files.len())
            .field("unsynced_namespace_calls", &disk.unsynced.len())
            .finish_non_exhaustive()
    }
}

/// Fails a call that ran as the power went out.
fn finish<T>(admit: Admit, value: T) -> io::Result<T> {
    match admit {
        Admit::Run => Ok(value),
        Admit::Last => Err(power_failure()),
    }
}

/// Refuses a call that cannot take effect in memory when the power fails
/// during it (a read, a sync).
fn read_only(admit: Admit) -> io::Result<()> {
    finish(admit, ())
}

impl Storage for PowerCutStorage {
    fn open(&self, path: &Path, create: bool) -> io::Result<Arc<dyn StorageFile>> {
        let (dir, name) = split(path)?;
        let mut disk = self.lock();
        let admit = disk.admit(self.boot())?;
        if !disk.volatile.dirs.contains_key(&dir) {
            return Err(error(io::ErrorKind::NotFound, "no such directory", &dir));
        }
        match disk.volatile.node(&dir, &name) {
            Some(Node::File(id)) => finish(admit, self.handle(id)),
            Some(Node::Dir) => Err(error(io::ErrorKind::IsADirectory, "a directory", path)),
            None if create => {
                let id = disk.next_file;
                disk.next_file += 1;
                disk.files.insert(id, FileData::default());
                disk.change(vec![Change { dir, name, node: Some(Node::File(id)) }]);
                finish(admit, self.handle(id))
            }
            None => Err(error(io::ErrorKind::NotFound, "no such file", path)),
        }
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let normal = normalize(path)?;
        let mut disk = self.lock();
        let admit = disk.admit(self.boot())?;
        let mut missing: Vec<&Path> =
            normal.ancestors().take_while(|dir| !disk.volatile.dirs.contains_key(*dir)).collect();
        missing.reverse();
        for dir in missing {
            let (parent, name) = split(dir)?;
            if disk.volatile.node(&parent, &name).is_some() {
                return Err(error(io::ErrorKind::NotADirectory, "a file is in the way", dir));
            }
            disk.change(vec![Change { dir: parent, name, node: Some(Node::Dir) }]);
        }
        finish(admit, ())
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let normal = normalize(path)?;
        let mut disk = self.lock();
        read_only(disk.admit(self.boot())?)?;
        let entries =
            disk.volatile.dirs.get(&normal).ok_or_else(|| error(io::ErrorKind::NotFound, "no such directory", path))?;
        Ok(entries.keys().map(|name| path.join(name)).collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let ((from_dir, from_name), (to_dir, to_name)) = (split(from)?, split(to)?);
        let mut disk = self.lock();
        let admit = disk.admit(self.boot())?;
        let node = match disk.volatile.node(&from_dir, &from_name) {
            Some(Node::File(id)) => Node::File(id),
            Some(Node::Dir) => return Err(error(io::ErrorKind::Unsupported, "renaming a directory", from)),
            None => return Err(error(io::ErrorKind::NotFound, "no such file", from)),
        };
        if !disk.volatile.dirs.contains_key(&to_dir) {
            return Err(error(io::ErrorKind::NotFound, "no such directory", &to_dir));
        }
        if disk.volatile.node(&to_dir, &to_name) == Some(Node::Dir) {
            return Err(error(io::ErrorKind::IsADirectory, "a directory", to));
        }
        if (&from_dir, &from_name) != (&to_dir, &to_name) {
            disk.change(vec![
                Change { dir: from_dir, name: from_name, node: None },
                Change { dir: to_dir, name: to_name, node: Some(node) },
            ]);
        }
        finish(admit, ())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let (dir, name) = split(path)?;
        let mut disk = self.lock();
        let admit = disk.admit(self.boot())?;
        match disk.volatile.node(&dir, &name) {
            Some(Node::File(_)) => {
                disk.change(vec![Change { dir, name, node: None }]);
                finish(admit, ())
            }
            Some(Node::Dir) => Err(error(io::ErrorKind::IsADirectory, "a directory", path)),
            None => Err(error(io::ErrorKind::NotFound, "no such file", path)),
        }
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let normal = normalize(path)?;
        let mut disk = self.lock();
        read_only(disk.admit(self.boot())?)?;
        if !disk.volatile.dirs.contains_key(&normal) {
            return Err(error(io::ErrorKind::NotFound, "no such directory", path));
        }
        disk.commit(&normal);
        Ok(())
    }
}
