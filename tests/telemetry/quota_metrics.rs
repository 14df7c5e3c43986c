//! Claims refused by a quota are exported as `idempo_quota_exceeded_total`
//! (labelled by shard), equal to `Stats::quota_refusals`, through a real
//! `metrics` recorder installed before the store opens.
#![cfg(feature = "metrics")]

use crate::common::{fingerprint, START_MS};
use idemkv::{store::Quota, Claim, ClaimRequest, Error, ManualClock, Store};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn refusals_reach_the_recorder() {
    // The recorder is installed for the whole process: a process of its own.
    crate::common::own_process(module_path!(), "refusals_reach_the_recorder", || {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only recorder of this process");
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(START_MS);
        let store =
            Store::open(dir.path(), crate::common::config(&clock).quota(Quota::new().records(3))).expect("open");
        for n in 0..10 {
            match store.claim(&ClaimRequest::new(&format!("k-{n}"), fingerprint("b")).scope("t")) {
                Ok(Claim::Acquired(lease)) => lease.complete(b"done").expect("complete"),
                Err(Error::QuotaExceeded { .. }) => {}
                other => panic!("{other:?}"),
            }
        }
        let exported: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, _, _, _)| key.key().name() == "idempo_quota_exceeded_total")
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(count) => count,
                other => panic!("not a counter: {other:?}"),
            })
            .sum();
        assert_eq!((exported, store.stats().quota_refusals), (7, 7));
    });
}
