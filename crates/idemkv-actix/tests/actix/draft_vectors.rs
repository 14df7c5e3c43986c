//! The public conformance vectors of the `Idempotency-Key` draft (the
//! anyonce suite's `core` and `profile` tiers), as idemkv runs them on
//! the tower layer, run on the middleware: the suite's fixture routes on
//! an actix-web server behind it ([`Actix`]), each vector with the
//! layer's defaults and under the setting docs/http.md documents for it.

use crate::server::store;
use crate::target::Actix;
use idemkv::conformance::http::draft_vectors_on;
use idemkv::conformance::Setting;

#[actix_web::test]
async fn the_drafts_vectors_pass_on_the_middleware() {
    let (store, _dir) = store();
    draft_vectors_on(&Actix(store), &Setting::new("actix-draft-vectors")).await;
}
