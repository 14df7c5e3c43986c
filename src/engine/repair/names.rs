//! Naming what repair drops: a record whose hint entry gives only its
//! keyed hash gets its scope and key from any whole frame of the same key
//! in the shard, and a dropped record with a newer whole record of its key
//! is marked superseded (its key reads as before). One more walk over the
//! shard's segments, the same walk as the analysis.

use super::salvage::{Analysis, Lost, Name};
use super::Evidence;
use crate::engine::entry::KeyHasher;
use crate::engine::segment::scanner;
use crate::error::{Error, Result};
use crate::io::Storage;
use std::collections::HashMap;

/// What the shard's whole frames say of one key.
#[derive(Default)]
struct Seen {
    name: Option<Name>,
    newest_lsn: u64,
}

/// Names every record of `lost` that can be named, and returns for each
/// whether a newer whole record of its key is kept.
///
/// # Errors
/// I/O errors.
pub(crate) fn resolve(
    storage: &dyn Storage,
    hasher: &KeyHasher,
    analyses: &[Analysis],
    lost: &mut [Lost],
) -> Result<Vec<bool>> {
    // An unverified record without a name has no hash to look for.
    let mut wanted: HashMap<u128, Seen> = lost
        .iter()
        .filter(|record| record.name.is_some() || record.evidence != Evidence::Unverified)
        .map(|record| (record.hash, Seen::default()))
        .collect();
    if !wanted.is_empty() {
        for analysis in analyses {
            let file =
                storage.open_read_only(&analysis.path).map_err(|error| Error::io("open", &analysis.path, error))?;
            let visit = |frame: scanner::Frame<'_>| {
                if let Some(seen) = wanted.get_mut(&hasher.hash(frame.header.keyspace, frame.scope, frame.key)) {
                    seen.newest_lsn = seen.newest_lsn.max(frame.header.lsn);
                    let name = || (frame.header.keyspace, frame.scope.to_vec(), frame.key.to_vec());
                    seen.name.get_or_insert_with(name);
                }
                Ok(())
            };
            scanner::salvage(&*file, &analysis.path, analysis.expected, analysis.boundaries(), visit, |_| Ok(()))?;
        }
    }
    let mut superseded = Vec::with_capacity(lost.len());
    for record in lost.iter_mut() {
        let seen = wanted.get(&record.hash);
        if record.name.is_none() && record.evidence == Evidence::HintWithoutKey {
            if let Some(name) = seen.and_then(|seen| seen.name.clone()) {
                record.name = Some(name);
                record.evidence = Evidence::Hint;
            }
        }
        superseded.push(seen.is_some_and(|seen| seen.newest_lsn > record.lsn));
    }
    Ok(superseded)
}
