//! The simulated disk behind [`super::PowerCutStorage`]: the namespace
//! (durable and volatile directory entries), each file's durable image and
//! its unsynced changes, and what a power cut keeps of them, per seed.

use super::{PowerCut, FILE_BYTES_MAX, SECTOR_BYTES};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

pub(super) type FileId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Node {
    File(FileId),
    Dir,
}

/// One directory entry set to a node, or removed.
#[derive(Debug, Clone)]
pub(super) struct Change {
    pub(super) dir: PathBuf,
    pub(super) name: OsString,
    pub(super) node: Option<Node>,
}

/// The changes of one namespace call, which survive a cut together or not
/// at all (a rename is two).
pub(super) type Operation = Vec<Change>;

/// Every directory by path, with its entries. The roots (`/` and the empty
/// path, the parent of a relative name) always exist.
#[derive(Debug, Clone)]
pub(super) struct Namespace {
    pub(super) dirs: BTreeMap<PathBuf, BTreeMap<OsString, Node>>,
}

impl Namespace {
    pub(super) fn new() -> Self {
        let dirs = [PathBuf::new(), PathBuf::from("/")].into_iter().map(|root| (root, BTreeMap::new())).collect();
        Namespace { dirs }
    }

    pub(super) fn node(&self, dir: &Path, name: &OsStr) -> Option<Node> {
        self.dirs.get(dir).and_then(|entries| entries.get(name).copied())
    }

    /// Applies a change. On the durable side a directory may receive
    /// entries before its own entry in its parent is durable.
    pub(super) fn apply(&mut self, change: &Change) {
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
    pub(super) fn prune(&mut self) -> BTreeSet<FileId> {
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

    pub(super) fn files(&self) -> BTreeSet<FileId> {
        let named = self.dirs.values().flat_map(BTreeMap::values);
        named.filter_map(|node| if let Node::File(id) = node { Some(*id) } else { None }).collect()
    }
}

/// A change of a file's bytes or length.
#[derive(Debug, Clone)]
pub(super) enum DataChange {
    Write { offset: usize, bytes: Vec<u8> },
    SetLen(usize),
}

impl DataChange {
    pub(super) fn apply(&self, image: &mut Vec<u8>) {
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

    pub(super) fn len_after(&self, before: usize) -> usize {
        match self {
            DataChange::Write { offset, bytes } => before.max(offset + bytes.len()),
            DataChange::SetLen(len) => *len,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct FileData {
    pub(super) durable: Vec<u8>,
    pub(super) volatile: Vec<u8>,
    /// Changes since the last sync, oldest first: the durable image with
    /// all of them applied is the volatile one.
    pub(super) unsynced: Vec<DataChange>,
}

/// What a call may do when the power is planned to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admit {
    /// A normal call.
    Run,
    /// The power fails during this call: its change lands in memory only
    /// and it fails.
    Last,
}

#[derive(Debug)]
pub(super) struct Disk {
    /// Bumped by every cut; handles of an older boot fail.
    pub(super) epoch: u64,
    pub(super) calls: u64,
    /// The call number that loses the power.
    pub(super) power_off_at: Option<u64>,
    pub(super) powered: bool,
    pub(super) files: BTreeMap<FileId, FileData>,
    pub(super) next_file: FileId,
    pub(super) volatile: Namespace,
    pub(super) durable: Namespace,
    /// Namespace calls not yet synced, oldest first.
    pub(super) unsynced: Vec<Operation>,
}

pub(super) fn power_failure() -> io::Error {
    io::Error::from_raw_os_error(5) // EIO
}

pub(super) fn error(kind: io::ErrorKind, what: &str, path: &Path) -> io::Error {
    io::Error::new(kind, format!("{what}: {}", path.display()))
}

/// `path` with `.` removed; `..` is refused.
pub(super) fn normalize(path: &Path) -> io::Result<PathBuf> {
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
pub(super) fn split(path: &Path) -> io::Result<(PathBuf, OsString)> {
    let normal = normalize(path)?;
    match (normal.parent(), normal.file_name()) {
        (Some(dir), Some(name)) => Ok((dir.to_path_buf(), name.to_os_string())),
        _ => Err(error(io::ErrorKind::InvalidInput, "not a file path", path)),
    }
}

pub(super) fn in_memory(offset: u64, len: usize) -> io::Result<(usize, usize)> {
    let offset = usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::FileTooLarge))?;
    match offset.checked_add(len) {
        Some(end) if end <= FILE_BYTES_MAX => Ok((offset, end)),
        _ => Err(io::Error::from(io::ErrorKind::FileTooLarge)),
    }
}

impl Disk {
    pub(super) fn new() -> Self {
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
    pub(super) fn admit(&mut self, epoch: u64) -> io::Result<Admit> {
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
    pub(super) fn change(&mut self, operation: Operation) {
        for change in &operation {
            self.volatile.apply(change);
        }
        self.unsynced.push(operation);
    }

    pub(super) fn file(&mut self, id: FileId) -> &mut FileData {
        // A handle of the current boot always names a file that exists:
        // files are forgotten only by a cut, which ends the boot.
        self.files.entry(id).or_default()
    }

    /// Makes durable every pending change in `dir`, and the earlier changes
    /// of the same names that they build on.
    pub(super) fn commit(&mut self, dir: &Path) {
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
    pub(super) fn settle_namespace(&mut self, random: &mut Random, report: &mut PowerCut) {
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
    pub(super) fn settle_files(&mut self, survivors: &BTreeSet<FileId>, random: &mut Random, report: &mut PowerCut) {
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
pub(super) fn settle_file(file: &FileData, random: &mut Random) -> Vec<u8> {
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
pub(super) struct Random(pub(super) u64);

impl Random {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut mixed = self.0;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        mixed ^ (mixed >> 31)
    }

    /// A number in `0..bound` (0 when `bound` is 0).
    pub(super) fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next() % bound
        }
    }

    /// An index in `0..bound` (0 when `bound` is 0).
    pub(super) fn index(&mut self, bound: usize) -> usize {
        let bound = u64::try_from(bound).unwrap_or(u64::MAX);
        usize::try_from(self.below(bound)).unwrap_or(0)
    }
}
