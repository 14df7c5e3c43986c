//! Recovering one segment at open: the prefix its hint describes, when the
//! hint matches the segment as it is, then the rest (or all of it) from the
//! log with the scanner. A missing, damaged or stale hint falls back to the
//! log, reported only as a debug event and a counter.

use crate::engine::recovery::replay::Replay;
use crate::engine::recovery::Access;
use crate::engine::segment::header::Mark;
use crate::engine::segment::hint::{self, Described, HintBuilder, HintEntry, HintReader, Opened};
use crate::engine::segment::scanner::{self, Expected, Resume};
use crate::error::{Error, Result};
use crate::events::event;
use crate::io::{Storage, StorageFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What recovering a shard's segments shares.
#[derive(Clone, Copy)]
pub(crate) struct Context<'a> {
    pub storage: &'a dyn Storage,
    pub dir: &'a Path,
    pub shard: u32,
    pub access: Access,
}

/// A segment opened and its header checked, before anything is replayed.
pub(crate) struct Prepared {
    id: u32,
    path: PathBuf,
    file: Arc<dyn StorageFile>,
    expected: Expected,
    lsn_floor: u64,
    mark: Mark,
    /// How far the segment is durable (its length if sealed).
    durable_end: u64,
    /// The frames, and keys less tombstones, its hint's header counts.
    hinted: (u64, u64),
}

impl Prepared {
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// The frames its hint lists, and the keys it brings into the index
    /// less its tombstones (estimates for pre-sizing; 0 without a
    /// plausible hint).
    pub(crate) fn hinted(&self) -> (u64, u64) {
        self.hinted
    }

    fn described(&self, len: u64) -> Described<'_> {
        Described {
            file: &*self.file,
            shard: self.expected.shard,
            segment: self.id,
            lsn_floor: self.lsn_floor,
            len,
            durable_end: self.durable_end,
        }
    }
}

/// One segment as recovered.
pub(crate) struct Recovered {
    pub file: Arc<dyn StorageFile>,
    pub lsn_floor: u64,
    /// End of the last whole frame.
    pub valid_end: u64,
    /// Bytes after it (cut by a writable open).
    pub torn_tail_bytes: u64,
    /// The durable mark found in the header.
    pub mark: Mark,
    /// The hint of every frame of the segment (collected for the active
    /// segment of a writable open; off otherwise).
    pub hint: HintBuilder,
    pub hint_loaded: bool,
    pub hint_ignored: bool,
}

/// Opens segment `id` at `path` and reads the counts of the hint beside it.
pub(crate) fn prepare(context: Context<'_>, id: u32, path: &Path, active: bool) -> Result<Prepared> {
    let file = match context.access {
        Access::ReadWrite => context.storage.open(path, false),
        Access::ReadOnly => context.storage.open_read_only(path),
    };
    let file = file.map_err(|error| Error::io("open", path, error))?;
    let len = file.len().map_err(|error| Error::io("stat", path, error))?;
    let expected = Expected { shard: context.shard, segment: id, active };
    let (header, mark) = scanner::read_header(&*file, path, len, expected)?;
    // A sealed segment was fsynced whole at its roll.
    let durable_end = if active { mark.synced_end } else { len };
    let mut prepared = Prepared {
        id,
        path: path.to_path_buf(),
        file,
        expected,
        lsn_floor: header.lsn_floor,
        mark,
        durable_end,
        hinted: (0, 0),
    };
    prepared.hinted = hint::counts(context.storage, context.dir, &prepared.described(len));
    Ok(prepared)
}

/// Replays a prepared segment into `replay`: the prefix its hint covers,
/// then the log after it. A writable open cuts a torn tail and writes the
/// hint of a sealed segment whose hint did not cover all its frames.
pub(crate) fn recover(context: Context<'_>, prepared: Prepared, replay: &mut Replay<'_>) -> Result<Recovered> {
    let len = prepared.file.len().map_err(|error| Error::io("stat", &prepared.path, error))?;
    let hint = hint::open(context.storage, context.dir, &prepared.described(len));
    let FromHint { mut builder, resume, loaded: hint_loaded, ignored: hint_ignored } =
        apply_hint(context, &prepared, hint, replay);
    let scan = replay_log(context, &prepared, len, resume, replay, &mut builder)?;
    let torn_tail_bytes = cut_torn_tail(context, &prepared, &scan)?;
    let valid_end = scan.valid_end;
    let rewritten = write_sealed_hint(context, &prepared, &mut builder, valid_end);
    let mark = settle_hint_and_mark(context, &prepared, hint_ignored && !rewritten, valid_end)?;
    Ok(Recovered {
        file: prepared.file,
        lsn_floor: prepared.lsn_floor,
        valid_end,
        torn_tail_bytes,
        mark,
        hint: builder,
        hint_loaded,
        hint_ignored,
    })
}

/// What the hint brought into the index: where the log scan resumes, and
/// the builder collecting the segment's hint.
struct FromHint {
    builder: HintBuilder,
    resume: Option<Resume>,
    loaded: bool,
    ignored: bool,
}

/// A builder that collects the segment's frames when `collect` (and the
/// open is writable), off otherwise. The active segment's builder collects
/// every frame (its hint is written at the next roll or close); a sealed
/// segment's only when its hint does not cover it, for the hint written
/// back after the scan.
fn collector(context: Context<'_>, prepared: &Prepared, collect: bool) -> HintBuilder {
    if context.access == Access::ReadWrite && collect {
        HintBuilder::new(context.shard, prepared.id, prepared.lsn_floor)
    } else {
        HintBuilder::off()
    }
}

/// Applies the segment's hint, if usable, into `replay`; a missing one
/// leaves the whole log to the scan, an ignored or damaged one is reported.
fn apply_hint(context: Context<'_>, prepared: &Prepared, hint: Opened, replay: &mut Replay<'_>) -> FromHint {
    let builder = collector(context, prepared, prepared.expected.active || !matches!(hint, Opened::Usable(_)));
    let mut from = FromHint { builder, resume: None, loaded: false, ignored: false };
    match hint {
        Opened::Missing => {}
        Opened::Ignored(reason) => {
            from.ignored = true;
            ignored(context.shard, prepared.id, reason);
        }
        Opened::Usable(mut reader) => match load(&mut reader, prepared.id, replay, &mut from.builder) {
            Ok(()) => {
                from.loaded = true;
                from.resume = Some(Resume { offset: reader.header.end, last_lsn: reader.header.last_lsn });
            }
            Err(reason) => {
                // `load` forgot what it applied: the log replays the whole
                // segment.
                from.ignored = true;
                ignored(context.shard, prepared.id, reason);
                from.builder = collector(context, prepared, true);
            }
        },
    }
    from
}

/// Replays the log from `resume` (or from the start) into `replay`,
/// handing each frame to `builder`.
fn replay_log(
    context: Context<'_>,
    prepared: &Prepared,
    len: u64,
    resume: Option<Resume>,
    replay: &mut Replay<'_>,
    builder: &mut HintBuilder,
) -> Result<scanner::Scan> {
    // A sealed segment with frames after its hint (the hint of an older
    // prefix) gets a whole one: its prefix is read again from the hint.
    let mut reload = context.access == Access::ReadWrite && !prepared.expected.active && resume.is_some();
    let Prepared { id, ref path, ref file, expected, .. } = *prepared;
    scanner::scan_from(&**file, path, expected, resume, |frame| {
        if std::mem::take(&mut reload) {
            *builder = reloaded(context, &prepared.described(len));
        }
        let hash = replay.hash(frame.header.keyspace, frame.scope, frame.key);
        let entry = HintEntry::of_frame(hash, &frame.header, frame.offset, frame.len);
        replay.apply(id, &entry).map_err(|reason| Error::corruption(path, frame.offset, reason))?;
        replay.max_updated_ms = replay.max_updated_ms.max(frame.header.updated_ms);
        builder.push(&entry, frame.header.updated_ms, entry.is_claim());
        Ok(())
    })
}

/// The bytes after the last whole frame, cut off by a writable open. Zeros
/// the writer filled ahead of its records stay (it writes into them next);
/// anything else after the last whole frame is torn.
fn cut_torn_tail(context: Context<'_>, prepared: &Prepared, scan: &scanner::Scan) -> Result<u64> {
    if scan.valid_end + scan.unwritten >= scan.len {
        return Ok(0);
    }
    if context.access == Access::ReadWrite {
        let file = &prepared.file;
        file.set_len(scan.valid_end)
            .and_then(|()| file.sync())
            .map_err(|error| Error::io("truncate", &prepared.path, error))?;
    }
    Ok(scan.len - scan.valid_end)
}

/// Writes the hint a sealed segment's builder collected (whether it was
/// written), and turns the builder off.
fn write_sealed_hint(context: Context<'_>, prepared: &Prepared, builder: &mut HintBuilder, valid_end: u64) -> bool {
    if prepared.expected.active || !builder.is_collecting() {
        return false;
    }
    let rewritten = builder.write_logged(context.storage, context.dir, &*prepared.file, valid_end);
    *builder = HintBuilder::off();
    rewritten
}

/// For a writable open: deletes an ignored hint not written again
/// (`forget`), and makes the active segment durable up to `valid_end`.
/// The durable mark the segment has afterwards.
fn settle_hint_and_mark(context: Context<'_>, prepared: &Prepared, forget: bool, valid_end: u64) -> Result<Mark> {
    let mark = prepared.mark;
    if context.access != Access::ReadWrite {
        return Ok(mark);
    }
    if forget {
        forget_hint(context, prepared.id);
    }
    if prepared.expected.active && valid_end > mark.synced_end {
        return mark_durable(&*prepared.file, &prepared.path, mark, valid_end);
    }
    Ok(mark)
}

/// Deletes an ignored hint that a writable open does not write again (the
/// active segment's, written at close; or one whose rewrite failed), so
/// that no hint is ignored open after open: until a new one is written the
/// segment is replayed from the log, as it was.
fn forget_hint(context: Context<'_>, id: u32) {
    let path = hint::hint_path(context.dir, id);
    #[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
    if let Err(error) = context.storage.remove_file(&path) {
        event!(debug, shard = context.shard, segment = id, error = %error, "an ignored hint could not be deleted");
    }
}

/// Makes the active segment's records found at open durable — a process
/// that was killed leaves them in the page cache, past the durable mark —
/// and moves the mark to their end (synced again, so the mark is durable
/// too). Open treats what it recovered as durable, and the hint written at
/// close, which may only cover durable records, is then used by the next
/// open instead of being ignored.
fn mark_durable(file: &dyn StorageFile, path: &Path, mark: Mark, end: u64) -> Result<Mark> {
    let io = |error| Error::io("fsync", path, error);
    file.sync().map_err(io)?;
    let next = Mark { synced_end: end, round: mark.round.wrapping_add(1) };
    file.write_all_at(&next.encode(), next.offset()).map_err(io)?;
    file.sync().map_err(io)?;
    Ok(next)
}

/// A builder holding every entry of the (usable) hint of `segment`, to
/// which the frames after it are added; off if the hint cannot be read
/// again.
fn reloaded(context: Context<'_>, segment: &Described<'_>) -> HintBuilder {
    let mut builder = HintBuilder::new(context.shard, segment.segment, segment.lsn_floor);
    let Opened::Usable(mut reader) = hint::open(context.storage, context.dir, segment) else {
        return HintBuilder::off();
    };
    let mut entries = Vec::new();
    loop {
        match reader.next_block(&mut entries) {
            Ok(true) => entries.iter().for_each(|entry| builder.push(entry, 0, entry.is_claim())),
            Ok(false) => break,
            Err(_) => return HintBuilder::off(),
        }
    }
    builder.raise_updated(reader.header.max_updated_ms);
    builder
}

/// Applies every entry of a hint (and hands each to `builder`); a hint
/// found damaged or inconsistent half-way has none of its entries applied.
fn load(
    reader: &mut HintReader,
    id: u32,
    replay: &mut Replay<'_>,
    builder: &mut HintBuilder,
) -> std::result::Result<(), &'static str> {
    let mark = replay.applied();
    let applied = apply_entries(reader, id, replay, builder);
    if applied.is_err() {
        replay.forget_after(&mark);
    }
    applied?;
    replay.max_updated_ms = replay.max_updated_ms.max(reader.header.max_updated_ms);
    builder.raise_updated(reader.header.max_updated_ms);
    Ok(())
}

fn apply_entries(
    reader: &mut HintReader,
    id: u32,
    replay: &mut Replay<'_>,
    builder: &mut HintBuilder,
) -> std::result::Result<(), &'static str> {
    // Bounded: each block moves the reader forward in its file. A closure
    // for each block, called where it is given: the reader's loop inlines
    // it, and each entry goes from the decoder to the replay in registers.
    while reader.next_block_with(|entry: &HintEntry| {
        replay.apply(id, entry)?;
        builder.push(entry, 0, entry.is_claim());
        Ok(())
    })? {}
    Ok(())
}

#[cfg_attr(not(feature = "tracing"), expect(unused_variables, reason = "read by the event"))]
fn ignored(shard: u32, segment: u32, reason: &str) {
    event!(debug, shard, segment, reason, "hint ignored; the segment is replayed from the log");
}
