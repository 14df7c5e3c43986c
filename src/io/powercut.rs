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
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
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

type FileId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    File(FileId),
    Dir,
}

/// One directory entry set to a node, or removed.
#[derive(Debug, Clone)]
struct Change {
    dir: PathBuf,
    name: OsString,
    node: Option<Node>,
}

/// The changes of one namespace call, which survive a cut together or not
/// at all (a rename is two).
type Operation = Vec<Change>;

/// Every directory by path, with its entries. The roots (`/` and the empty
/// path, the parent of a relative name) always exist.
#[derive(Debug, Clone)]
struct Namespace {
    dirs: BTreeMap<PathBuf, BTreeMap<OsString, Node>>,
}

impl Namespace {
    fn new() -> Self {
        let dirs = [PathBuf::new(), PathBuf::from("/")].into_iter().map(|root| (root, BTreeMap::new())).collect();
        Namespace { dirs }
    }

    fn node(&self, dir: &Path, name: &OsStr) -> Option<Node> {
        self.dirs.get(dir).and_then(|entries| entries.get(name).copied())
    }

    /// Applies a change. On the durable side a directory may receive
    /// entries before its own entry in its parent is durable.
    fn apply(&mut self, change: &Change) {
        let entries = self.dirs.entry(change.dir.clone()).or_default();
        match change.node {
            Some(node) => {
                entries.insert(change.name.clone(), node);
                if node == Node::Dir {
                    self.dirs.entry(change.dir.join(&change.name)).or_default();
                }
            }
            None => {
                entries.remove(&change.name);
            }
        }
    }

    /// Forgets every directory that cannot be reached from a root, and
    /// returns the files still named.
    fn prune(&mut self) -> BTreeSet<FileId> {
        let mut reachable = BTreeSet::new();
        let mut stack = vec![PathBuf::new(), PathBuf::from("/")];
        let mut files = BTreeSet::new();
        while let Some(dir) = stack.pop() {
            if !reachable.insert(dir.clone()) {
                continue;
            }
            for (name, node) in self.dirs.get(&dir).into_iter().flatten() {
                match node {
                    Node::Dir => stack.push(dir.join(name)),
                    Node::File(id) => {
                        files.insert(*id);
                    }
                }
            }
        }
        self.dirs.retain(|path, _| reachable.contains(path));
        files
    }

    fn files(&self) -> BTreeSet<FileId> {
        let named = self.dirs.values().flat_map(BTreeMap::values);
        named.filter_map(|node| if let Node::File(id) = node { Some(*id) } else { None }).collect()
    }
}

/// A change of a file's bytes or length.
#[derive(Debug, Clone)]
enum DataChange {
    Write { offset: usize, bytes: Vec<u8> },
    SetLen(usize),
}

impl DataChange {
    fn apply(&self, image: &mut Vec<u8>) {
        match self {
            DataChange::Write { offset, bytes } => {
                let end = offset + bytes.len();
                if image.len() < end {
                    image.resize(end, 0);
                }
                image[*offset..end].copy_from_slice(bytes);
            }
            DataChange::SetLen(len) => image.resize(*len, 0),
        }
    }

    fn len_after(&self, before: usize) -> usize {
        match self {
            DataChange::Write { offset, bytes } => before.max(offset + bytes.len()),
            DataChange::SetLen(len) => *len,
        }
    }
}

#[derive(Debug, Default)]
struct FileData {
    durable: Vec<u8>,
    volatile: Vec<u8>,
    /// Changes since the last sync, oldest first: the durable image with
    /// all of them applied is the volatile one.
    unsynced: Vec<DataChange>,
}

/// What a call may do when the power is planned to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    /// A normal call.
    Run,
    /// The power fails during this call: its change lands in memory only
    /// and it fails.
    Last,
}

#[derive(Debug)]
struct Disk {
    /// Bumped by every cut; handles of an older boot fail.
    epoch: u64,
    calls: u64,
    /// The call number that loses the power.
    power_off_at: Option<u64>,
    powered: bool,
    files: BTreeMap<FileId, FileData>,
    next_file: FileId,
    volatile: Namespace,
    durable: Namespace,
    /// Namespace calls not yet synced, oldest first.
    unsynced: Vec<Operation>,
}

fn power_failure() -> io::Error {
    io::Error::from_raw_os_error(5) // EIO
}

fn error(kind: io::ErrorKind, what: &str, path: &Path) -> io::Error {
    io::Error::new(kind, format!("{what}: {}", path.display()))
}

/// `path` with `.` removed; `..` is refused.
fn normalize(path: &Path) -> io::Result<PathBuf> {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::CurDir => {}
            Component::RootDir => normal.push("/"),
            Component::ParentDir => return Err(error(io::ErrorKind::InvalidInput, "`..` in a path", path)),
            Component::Normal(name) => normal.push(name),
        }
    }
    Ok(normal)
}

/// The directory and name of `path`.
fn split(path: &Path) -> io::Result<(PathBuf, OsString)> {
    let normal = normalize(path)?;
    match (normal.parent(), normal.file_name()) {
        (Some(dir), Some(name)) => Ok((dir.to_path_buf(), name.to_os_string())),
        _ => Err(error(io::ErrorKind::InvalidInput, "not a file path", path)),
    }
}

fn in_memory(offset: u64, len: usize) -> io::Result<(usize, usize)> {
    let offset = usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::FileTooLarge))?;
    match offset.checked_add(len) {
        Some(end) if end <= FILE_BYTES_MAX => Ok((offset, end)),
        _ => Err(io::Error::from(io::ErrorKind::FileTooLarge)),
    }
}

impl Disk {
    fn new() -> Self {
        Disk {
            epoch: 0,
            calls: 0,
            power_off_at: None,
            powered: true,
            files: BTreeMap::new(),
            next_file: 1,
            volatile: Namespace::new(),
            durable: Namespace::new(),
            unsynced: Vec::new(),
        }
    }

    /// Counts one call made from boot `epoch` and says how it may run.
    fn admit(&mut self, epoch: u64) -> io::Result<Admit> {
        if epoch != self.epoch || !self.powered {
            return Err(power_failure());
        }
        self.calls += 1;
        if self.power_off_at == Some(self.calls) {
            self.powered = false;
            return Ok(Admit::Last);
        }
        Ok(Admit::Run)
    }

    /// Records a namespace call in the volatile namespace.
    fn change(&mut self, operation: Operation) {
        for change in &operation {
            self.volatile.apply(change);
        }
        self.unsynced.push(operation);
    }

    fn file(&mut self, id: FileId) -> &mut FileData {
        // A handle of the current boot always names a file that exists:
        // files are forgotten only by a cut, which ends the boot.
        self.files.entry(id).or_default()
    }

    /// Makes durable every pending change in `dir`, and the earlier changes
    /// of the same names that they build on.
    fn commit(&mut self, dir: &Path) {
        let mut names: BTreeSet<(&Path, &OsStr)> = BTreeSet::new();
        let mut required = vec![false; self.unsynced.len()];
        for (index, operation) in self.unsynced.iter().enumerate().rev() {
            let needed = operation
                .iter()
                .any(|change| change.dir == dir || names.contains(&(change.dir.as_path(), change.name.as_os_str())));
            if needed {
                required[index] = true;
                names.extend(operation.iter().map(|change| (change.dir.as_path(), change.name.as_os_str())));
            }
        }
        let operations = std::mem::take(&mut self.unsynced);
        for (operation, required) in operations.into_iter().zip(required) {
            if required {
                for change in &operation {
                    self.durable.apply(change);
                }
            } else {
                self.unsynced.push(operation);
            }
        }
    }

    /// Keeps or drops each pending namespace call.
    fn settle_namespace(&mut self, random: &mut Random, report: &mut PowerCut) {
        let keep_percent = match random.below(4) {
            0 => 0,
            1 => 100,
            2 => 50,
            _ => random.below(101),
        };
        let mut dropped: BTreeSet<(PathBuf, OsString)> = BTreeSet::new();
        for operation in std::mem::take(&mut self.unsynced) {
            let depends = operation.iter().any(|change| dropped.contains(&(change.dir.clone(), change.name.clone())));
            if !depends && random.below(100) < keep_percent {
                for change in &operation {
                    self.durable.apply(change);
                }
                report.changes_kept += 1;
            } else {
                dropped.extend(operation.iter().map(|change| (change.dir.clone(), change.name.clone())));
                report.changes_dropped += 1;
            }
        }
    }

    /// Gives every surviving file its image after the cut and forgets the
    /// others.
    fn settle_files(&mut self, survivors: &BTreeSet<FileId>, random: &mut Random, report: &mut PowerCut) {
        let named_before = self.volatile.files();
        report.files_vanished = named_before.difference(survivors).count() as u64;
        self.files.retain(|id, _| survivors.contains(id));
        for file in self.files.values_mut() {
            if file.unsynced.is_empty() {
                continue;
            }
            let image = settle_file(file, random);
            if image == file.volatile {
                report.files_whole += 1;
            } else if image == file.durable {
                report.files_rolled_back += 1;
            } else {
                report.files_torn += 1;
            }
            file.durable.clone_from(&image);
            file.volatile = image;
            file.unsynced.clear();
        }
    }
}

/// The image a cut leaves of a file with unsynced changes: each sector as
/// of some moment since the last sync (moment 0 is the durable image,
/// moment `i` the image after the `i`-th change), the length as of some
/// moment too.
fn settle_file(file: &FileData, random: &mut Random) -> Vec<u8> {
    let changes = &file.unsynced;
    let mut lengths = Vec::with_capacity(changes.len() + 1);
    lengths.push(file.durable.len());
    for change in changes {
        lengths.push(change.len_after(*lengths.last().unwrap_or(&0)));
    }
    let sectors = lengths.iter().max().map_or(0, |len| len.div_ceil(SECTOR_BYTES));
    let (length_at, moments) = match random.below(100) {
        // Nothing since the last sync reached the disk.
        0..15 => return file.durable.clone(),
        // Everything did (as after a process crash).
        15..30 => return file.volatile.clone(),
        // In order up to some change, the next write torn at a sector.
        30..70 => {
            let reached = random.index(changes.len() + 1);
            let mut moments = vec![reached; sectors];
            let mut length_at = reached;
            if let Some(DataChange::Write { offset, bytes }) = changes.get(reached) {
                if !bytes.is_empty() && random.below(2) == 0 {
                    let first = offset / SECTOR_BYTES;
                    let last = (offset + bytes.len() - 1) / SECTOR_BYTES;
                    let written = random.index(last - first + 1);
                    moments[first..first + written].fill(reached + 1);
                    length_at += random.index(2);
                }
            }
            (length_at, moments)
        }
        // Sectors written back out of order, each as of its own moment.
        _ => {
            let moments = (0..sectors).map(|_| random.index(changes.len() + 1)).collect();
            (random.index(changes.len() + 1), moments)
        }
    };
    let mut by_moment = vec![Vec::new(); changes.len() + 1];
    for (sector, moment) in moments.into_iter().enumerate() {
        by_moment[moment].push(sector);
    }
    let mut result = vec![0u8; lengths[length_at]];
    let mut image = file.durable.clone();
    for (moment, sectors) in by_moment.iter().enumerate() {
        if moment > 0 {
            changes[moment - 1].apply(&mut image);
        }
        for sector in sectors {
            let start = sector * SECTOR_BYTES;
            let end = (start + SECTOR_BYTES).min(result.len()).min(image.len());
            if start < end {
                result[start..end].copy_from_slice(&image[start..end]);
            }
        }
    }
    result
}

/// A tiny seeded generator (SplitMix64): enough to choose fates, and free
/// of dependencies.
#[derive(Debug)]
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next() % bound
        }
    }

    /// An index in `0..bound` (0 when `bound` is 0).
    fn index(&mut self, bound: usize) -> usize {
        let bound = u64::try_from(bound).unwrap_or(u64::MAX);
        usize::try_from(self.below(bound)).unwrap_or(0)
    }
}

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

/// An open file of a [`PowerCutStorage`], valid for the boot it was opened in.
struct PowerCutFile {
    disk: Arc<Mutex<Disk>>,
    id: FileId,
    epoch: u64,
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
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEDS: u64 = 400;

    fn dir() -> &'static Path {
        Path::new("/store")
    }

    /// A disk where `/store` exists durably.
    fn disk() -> PowerCutStorage {
        let storage = PowerCutStorage::new();
        storage.create_dir_all(dir()).expect("mkdir");
        storage.sync_dir(Path::new("/")).expect("sync root");
        storage
    }

    fn read(storage: &PowerCutStorage, path: &Path) -> Option<Vec<u8>> {
        let file = storage.open(path, false).ok()?;
        let mut bytes = vec![0u8; usize::try_from(file.len().expect("len")).expect("small")];
        file.read_exact_at(&mut bytes, 0).expect("read");
        Some(bytes)
    }

    /// A file made durable in its directory with `bytes`.
    fn durable_file(storage: &PowerCutStorage, name: &str, bytes: &[u8]) -> Arc<dyn StorageFile> {
        let file = storage.open(&dir().join(name), true).expect("create");
        file.write_all_at(bytes, 0).expect("write");
        file.sync().expect("sync");
        storage.sync_dir(dir()).expect("sync dir");
        file
    }

    #[test]
    fn synced_data_survives_every_seed() {
        for seed in 0..SEEDS {
            let storage = disk();
            let synced: Vec<u8> = (0..1500u32).map(|byte| (byte % 251) as u8).collect();
            let file = durable_file(&storage, "log", &synced);
            // Unsynced writes after it, one of them sharing its last sector,
            // a truncation that was not synced, and a new file.
            file.write_all_at(&[0xAA; 700], 1500).expect("write");
            file.write_all_at(&[0xBB; 2000], 2200).expect("write");
            let other = durable_file(&storage, "other", b"kept");
            other.set_len(1).expect("truncate");
            storage.open(&dir().join("new"), true).expect("create").write_all_at(b"x", 0).expect("write");
            storage.power_cut(seed);
            let after = read(&storage, &dir().join("log")).expect("synced file survives");
            assert_eq!(&after[..1500], &synced[..], "seed {seed}");
            assert!(after.len() <= 4200, "seed {seed}");
            // An unsynced truncation may or may not have happened, and the
            // bytes it cut may read as zeros under the old length.
            let other = read(&storage, &dir().join("other")).expect("synced file survives");
            assert!(matches!(other.as_slice(), b"kept" | b"k" | b"k\0\0\0"), "seed {seed}: {other:?}");
        }
    }

    #[test]
    fn unsynced_data_may_vanish_or_tear_sector_by_sector() {
        let new = vec![0xCC; 4 * SECTOR_BYTES];
        let (mut vanished, mut torn, mut whole) = (0, 0, 0);
        for seed in 0..SEEDS {
            let storage = disk();
            let file = durable_file(&storage, "log", &[]);
            file.write_all_at(&new, 0).expect("write");
            storage.power_cut(seed);
            let after = read(&storage, &dir().join("log")).expect("the file was durable");
            assert!(after.len() <= new.len(), "seed {seed}");
            for sector in after.chunks(SECTOR_BYTES) {
                let old = sector.iter().all(|byte| *byte == 0);
                let written = sector.iter().all(|byte| *byte == 0xCC);
                assert!(old || written, "seed {seed}: a sector is half written");
            }
            let written = after.chunks(SECTOR_BYTES).filter(|sector| sector[0] == 0xCC).count();
            match written {
                0 => vanished += 1,
                4 => whole += 1,
                _ => torn += 1,
            }
        }
        assert!(vanished > 0 && torn > 0 && whole > 0, "{vanished} vanished, {torn} torn, {whole} whole");
    }

    #[test]
    fn a_file_never_made_durable_in_its_directory_vanishes_with_its_data() {
        let (mut vanished, mut kept) = (0, 0);
        for seed in 0..SEEDS {
            let storage = disk();
            let file = storage.open(&dir().join("new"), true).expect("create");
            file.write_all_at(b"synced data, unsynced name", 0).expect("write");
            file.sync().expect("sync");
            let report = storage.power_cut(seed);
            match read(&storage, &dir().join("new")) {
                None => {
                    vanished += 1;
                    assert_eq!(report.files_vanished, 1);
                    // Its data shows up nowhere else.
                    assert_eq!(storage.read_dir(dir()).expect("ls"), Vec::<PathBuf>::new());
                }
                Some(bytes) => {
                    kept += 1;
                    assert_eq!(bytes, b"synced data, unsynced name");
                }
            }
        }
        assert!(vanished > 0 && kept > 0, "{vanished} vanished, {kept} kept");
        // A directory whose own entry was never synced takes its files along,
        // even those synced inside it.
        let mut lost_with_directory = 0;
        for seed in 0..SEEDS {
            let storage = disk();
            storage.create_dir_all(&dir().join("sub")).expect("mkdir");
            let file = storage.open(&dir().join("sub/f"), true).expect("create");
            file.write_all_at(b"data", 0).expect("write");
            file.sync().expect("sync");
            storage.sync_dir(&dir().join("sub")).expect("sync sub");
            storage.power_cut(seed);
            match read(&storage, &dir().join("sub/f")) {
                None => lost_with_directory += 1,
                Some(bytes) => assert_eq!(bytes, b"data"),
            }
        }
        assert!(lost_with_directory > 0);
    }

    #[test]
    fn a_rename_is_all_or_nothing() {
        let (mut old, mut new) = (0, 0);
        for seed in 0..SEEDS {
            let storage = disk();
            durable_file(&storage, "segment", b"old contents");
            let temp = storage.open(&dir().join("segment.tmp"), true).expect("create");
            temp.write_all_at(b"new contents", 0).expect("write");
            temp.sync().expect("sync");
            storage.rename(&dir().join("segment.tmp"), &dir().join("segment")).expect("rename");
            storage.power_cut(seed);
            let segment = read(&storage, &dir().join("segment")).expect("never neither name");
            let temp = read(&storage, &dir().join("segment.tmp"));
            match segment.as_slice() {
                b"old contents" => old += 1,
                b"new contents" => {
                    new += 1;
                    assert_eq!(temp, None, "seed {seed}: both names after the rename");
                }
                other => panic!("seed {seed}: {other:?}"),
            }
        }
        assert!(old > 0 && new > 0, "{old} old, {new} new");
        // Synced, the rename is there for every seed.
        for seed in 0..SEEDS {
            let storage = disk();
            durable_file(&storage, "segment", b"old");
            durable_file(&storage, "segment.tmp", b"new");
            storage.rename(&dir().join("segment.tmp"), &dir().join("segment")).expect("rename");
            storage.sync_dir(dir()).expect("sync dir");
            storage.power_cut(seed);
            assert_eq!(read(&storage, &dir().join("segment")).as_deref(), Some(&b"new"[..]), "seed {seed}");
            assert_eq!(read(&storage, &dir().join("segment.tmp")), None, "seed {seed}");
        }
    }

    #[test]
    fn a_removal_not_synced_may_come_back() {
        let (mut back, mut gone) = (0, 0);
        for seed in 0..SEEDS {
            let storage = disk();
            durable_file(&storage, "old", b"whole");
            storage.remove_file(&dir().join("old")).expect("remove");
            assert_eq!(read(&storage, &dir().join("old")), None, "reads see the removal at once");
            storage.power_cut(seed);
            match read(&storage, &dir().join("old")) {
                Some(bytes) => {
                    back += 1;
                    assert_eq!(bytes, b"whole");
                }
                None => gone += 1,
            }
            let storage = disk();
            durable_file(&storage, "old", b"whole");
            storage.remove_file(&dir().join("old")).expect("remove");
            storage.sync_dir(dir()).expect("sync dir");
            storage.power_cut(seed);
            assert_eq!(read(&storage, &dir().join("old")), None, "seed {seed}: a synced removal came back");
        }
        assert!(back > 0 && gone > 0, "{back} back, {gone} gone");
    }

    #[test]
    fn the_same_seed_gives_the_same_disk() {
        let run = |seed| {
            let storage = disk();
            let file = durable_file(&storage, "log", b"base");
            for round in 0..20u8 {
                file.write_all_at(&[round; 300], 4 + 300 * u64::from(round)).expect("write");
            }
            storage.power_cut(seed);
            read(&storage, &dir().join("log"))
        };
        for seed in 0..50 {
            assert_eq!(run(seed), run(seed), "seed {seed}");
        }
        assert!((0..50).any(|seed| run(seed) != run(seed + 1)));
    }

    #[test]
    fn handles_from_before_a_cut_fail() {
        let storage = disk();
        let file = durable_file(&storage, "log", b"data");
        let old_clone = storage.clone();
        storage.power_cut(1);
        let error = file.len().expect_err("an old handle");
        assert_eq!(error.raw_os_error(), Some(5));
        assert!(old_clone.read_dir(dir()).is_err(), "an old clone");
        assert!(old_clone.remove_file(&dir().join("log")).is_err());
        assert!(storage.open(&dir().join("log"), false).is_ok(), "the new boot");
        assert!(storage.clone().read_dir(dir()).is_ok(), "a clone of the new boot");
    }

    #[test]
    fn a_planned_power_failure_stops_every_call_until_the_cut() {
        let storage = disk();
        let file = durable_file(&storage, "log", b"");
        storage.power_off_after(1);
        file.write_all_at(b"first", 0).expect("one more call succeeds");
        assert!(file.write_all_at(b" second", 5).is_err(), "the call the power fails in");
        assert!(storage.powered_off());
        assert!(file.sync().is_err() && storage.read_dir(dir()).is_err(), "and every call after it");
        // The failing write reached the page cache: a cut may keep it.
        let kept_both = (0..SEEDS)
            .filter(|seed| {
                let storage = disk();
                let file = durable_file(&storage, "log", b"");
                storage.power_off_after(1);
                let _first = file.write_all_at(b"first", 0);
                let _second = file.write_all_at(b" second", 5);
                storage.power_cut(*seed);
                read(&storage, &dir().join("log")).as_deref() == Some(&b"first second"[..])
            })
            .count();
        assert!(kept_both > 0);
        storage.power_cut(3);
        assert!(!storage.powered_off());
        assert!(storage.read_dir(dir()).is_ok());
    }

    #[test]
    fn a_length_may_outlive_its_data_as_zeros() {
        let mut zeros = 0;
        for seed in 0..SEEDS {
            let storage = disk();
            let file = durable_file(&storage, "log", &[]);
            file.write_all_at(&[7; 3 * SECTOR_BYTES], 0).expect("write");
            storage.power_cut(seed);
            let after = read(&storage, &dir().join("log")).expect("durable");
            if after.len() == 3 * SECTOR_BYTES && after.contains(&0) {
                zeros += 1;
            }
        }
        assert!(zeros > 0);
    }

    #[test]
    fn reads_see_the_volatile_state_and_errors_match_the_real_ones() {
        let storage = disk();
        let file = storage.open(&dir().join("f"), true).expect("create");
        file.write_all_at(b"hello", 3).expect("write");
        assert_eq!(file.len().expect("len"), 8);
        let mut buf = [0u8; 5];
        file.read_exact_at(&mut buf, 3).expect("read");
        assert_eq!(&buf, b"hello");
        let mut past_end = [0u8; 4];
        assert_eq!(file.read_exact_at(&mut past_end, 6).expect_err("short").kind(), io::ErrorKind::UnexpectedEof);
        file.set_len(2).expect("truncate");
        assert_eq!(file.len().expect("len"), 2);
        assert_eq!(storage.read_dir(dir()).expect("ls"), vec![dir().join("f")]);
        let missing = storage.open(&dir().join("nothing"), false).expect_err("missing");
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        assert_eq!(storage.open(&dir().join("no/such"), true).expect_err("no dir").kind(), io::ErrorKind::NotFound);
        assert_eq!(storage.remove_file(dir()).expect_err("a dir").kind(), io::ErrorKind::IsADirectory);
        let too_far = u64::try_from(FILE_BYTES_MAX).expect("fits");
        assert_eq!(file.write_all_at(b"x", too_far).expect_err("too far").kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(file.set_len(u64::MAX).expect_err("too long").kind(), io::ErrorKind::FileTooLarge);
    }
}
