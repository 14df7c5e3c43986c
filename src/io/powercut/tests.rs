//! The simulator's own tests: what survives a power cut and what may not.
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
