//! The vectors themselves, core then profile, each a list of steps and
//! what each step's answer must be (see the parent module).

use super::{post_to, step, vector, Body, Field, Tier, Vector, REPLAYED};
use crate::http::{FailurePolicy, LayerConfig};
use axum::http::{HeaderName, Method};
use std::time::Duration;

fn replayed(config: LayerConfig) -> LayerConfig {
    config.replay_header(HeaderName::from_static(REPLAYED))
}

// Core: what the draft states.

fn concurrent_409() -> Vector {
    let slow = |id| post_to(id, "/slow?ms=1500", Some("k-concurrent-1"), "slow");
    vector(
        "core/concurrent-409",
        Tier::Core,
        vec![slow("original").body(Body::Is("slept:1500")), slow("duplicate").concurrent().answers(409).runs(1)],
    )
}

fn expiry_executes_again() -> Vector {
    let echo = |id| post_to(id, "/echo", Some("k-expiry-1"), "expire").answers(201);
    let steps = vec![echo("first").runs(1), echo("after-expiry").after(Duration::from_millis(2500)).runs(2)];
    Vector { short_ttl: true, ..vector("core/expiry-executes-again", Tier::Core, steps) }
}

fn get_ignored() -> Vector {
    let count = |id| step(id, Method::GET, "/counter", Some("k-get-1"), "");
    vector(
        "core/get-ignored",
        Tier::Core,
        vec![
            count("get-before").json("count", 0),
            post_to("post", "/echo", Some("k-get-2"), "x").answers(201).runs(1),
            count("get-after").json("count", 1),
        ],
    )
}

fn header_name_case_insensitive() -> Vector {
    let echo = |id| post_to(id, "/echo", Some("k-case-1"), "case").answers(201).runs(1);
    vector(
        "core/header-name-case-insensitive",
        Tier::Core,
        vec![echo("first"), echo("retry-lowercase").lowercase().body(Body::SameAs("first"))],
    )
}

fn key_missing_required() -> Vector {
    let missing = post_to("missing", "/echo", None, "no key").answers(400).field("Content-Type", Field::Problem);
    vector("core/key-missing-required", Tier::Core, vec![missing.runs(0)])
}

fn mismatch_422() -> Vector {
    let echo = |id, body| post_to(id, "/echo", Some("k-mismatch-1"), body);
    vector(
        "core/mismatch-422",
        Tier::Core,
        vec![echo("first", "payload-a").answers(201).runs(1), echo("changed", "payload-b").answers(422).runs(1)],
    )
}

fn mismatch_does_not_poison() -> Vector {
    let echo = |id, body| post_to(id, "/echo", Some("k-poison-1"), body);
    vector(
        "core/mismatch-does-not-poison",
        Tier::Core,
        vec![
            echo("first", "payload-a").answers(201).body(Body::Is("payload-a")).runs(1),
            echo("changed", "payload-b").answers(422).runs(1),
            echo("corrected", "payload-a").answers(201).body(Body::SameAs("first")).runs(1),
        ],
    )
}

fn post_executes_once() -> Vector {
    let first = post_to("first", "/echo", Some("k-post-once-1"), "hello").answers(201).body(Body::Is("hello"));
    vector("core/post-executes-once", Tier::Core, vec![first.runs(1)])
}

/// A first request to `/echo` that runs and answers `body`, and its retry
/// that replays it.
fn first_and_replay(id: &'static str, key: &'static str, body: &'static str) -> Vector {
    let echo = |step| post_to(step, "/echo", Some(key), body).answers(201).runs(1);
    vector(id, Tier::Core, vec![echo("first").body(Body::Is(body)), echo("retry").body(Body::SameAs("first"))])
}

fn retry_replays() -> Vector {
    first_and_replay("core/retry-replays", "k-retry-1", "payload-a")
}

fn sf_string_quoted_key() -> Vector {
    first_and_replay("core/sf-string-quoted-key", "\"quoted-key-1\"", "quoted")
}

fn two_keys_execute_twice() -> Vector {
    let echo = |id, key| post_to(id, "/echo", Some(key), "same").answers(201);
    vector(
        "core/two-keys-execute-twice",
        Tier::Core,
        vec![echo("first", "k-two-1").runs(1), echo("second", "k-two-2").runs(2)],
    )
}

// Profile: the suite's choices where the draft is silent.

fn replayed_4xx() -> Vector {
    let status = |id| post_to(id, "/status/404", Some("k-4xx-1"), "s").answers(404).runs(1);
    let steps = vec![
        status("first").body(Body::Is("status:404")),
        status("retry").body(Body::SameAs("first")).field("Idempotency-Replayed", Field::Is("true")),
    ];
    vector("profile/4xx-replayed", Tier::Profile, steps).under("replay_header(Idempotency-Replayed)", replayed)
}

fn not_stored_5xx() -> Vector {
    let status = |id| post_to(id, "/status/500", Some("k-5xx-1"), "s").answers(500);
    let steps = vec![
        status("first").body(Body::Is("status:500")).runs(1),
        status("retry").field("Idempotency-Replayed", Field::Absent).runs(2),
    ];
    vector("profile/5xx-not-stored", Tier::Profile, steps)
        .under("replay_header(Idempotency-Replayed), failure_policy(ReleaseOnServerError)", |config| {
            replayed(config).failure_policy(FailurePolicy::ReleaseOnServerError)
        })
}

fn empty_key_rejected() -> Vector {
    let empty = post_to("empty", "/echo", Some("\"\""), "e").answers(400).json("code", "invalid-key");
    vector("profile/empty-key-rejected", Tier::Profile, vec![empty.runs(0)])
}

fn key_too_long() -> Vector {
    let key = "a".repeat(256);
    let long = post_to("too-long", "/echo", Some(&key), "long").answers(400).json("code", "invalid-key");
    vector("profile/key-too-long", Tier::Profile, vec![long.runs(0)])
}

fn omitted_body_replay() -> Vector {
    let large = |id| post_to(id, "/large?bytes=1048577", Some("k-omitted-1"), "l").runs(1);
    let steps = vec![
        large("first").body(Body::Bytes(1_048_577)),
        large("retry")
            .body(Body::Bytes(0))
            .field("Idempotency-Replayed", Field::Is("true"))
            .field("Idempotency-Replay", Field::Is("omitted")),
    ];
    vector("profile/omitted-body-replay", Tier::Profile, steps).under("replay_header(Idempotency-Replayed)", replayed)
}

fn problem_code_member() -> Vector {
    let echo = |id, body| post_to(id, "/echo", Some("k-code-1"), body);
    let steps = vec![
        post_to("missing", "/echo", None, "no key").answers(400).json("code", "missing-key"),
        echo("first", "payload-a").answers(201),
        echo("changed", "payload-b").answers(422).json("code", "fingerprint-mismatch"),
    ];
    vector("profile/problem-code-member", Tier::Profile, steps)
}

fn problem_content_type() -> Vector {
    let echo = |id, body| post_to(id, "/echo", Some("k-ctype-1"), body);
    let steps = vec![
        post_to("missing", "/echo", None, "no key").answers(400).field("Content-Type", Field::Problem),
        echo("first", "payload-a").answers(201),
        echo("changed", "payload-b").answers(422).field("Content-Type", Field::Problem),
    ];
    vector("profile/problem-content-type", Tier::Profile, steps)
}

fn replayed_header() -> Vector {
    let echo = |id| post_to(id, "/echo", Some("k-replayed-1"), "r").answers(201);
    let steps = vec![
        echo("first").field("Idempotency-Replayed", Field::Absent),
        echo("retry").field("Idempotency-Replayed", Field::Is("true")).body(Body::SameAs("first")),
    ];
    vector("profile/replayed-header", Tier::Profile, steps).under("replay_header(Idempotency-Replayed)", replayed)
}

fn retry_after_on_409() -> Vector {
    let slow = |id| post_to(id, "/slow?ms=1500", Some("k-retry-after-1"), "slow");
    let duplicate = slow("duplicate").concurrent().answers(409).field("Retry-After", Field::Seconds);
    vector("profile/retry-after-on-409", Tier::Profile, vec![slow("original"), duplicate])
}

pub(super) fn vectors() -> Vec<Vector> {
    vec![
        concurrent_409(),
        expiry_executes_again(),
        get_ignored(),
        header_name_case_insensitive(),
        key_missing_required(),
        mismatch_422(),
        mismatch_does_not_poison(),
        post_executes_once(),
        retry_replays(),
        sf_string_quoted_key(),
        two_keys_execute_twice(),
        replayed_4xx(),
        not_stored_5xx(),
        empty_key_rejected(),
        key_too_long(),
        omitted_body_replay(),
        problem_code_member(),
        problem_content_type(),
        replayed_header(),
        retry_after_on_409(),
    ]
}
