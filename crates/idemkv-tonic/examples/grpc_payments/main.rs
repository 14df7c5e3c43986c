//! A payments service over gRPC whose `Charge` runs once per AIP-155
//! `request_id`: a tonic server on a loopback port behind the idempotency
//! face, over an embedded store in a temporary directory, and a tonic
//! client that charges, retries, reuses the id for another amount and
//! sends a malformed id.
//!
//! ```text
//! cargo run -p idemkv-tonic --example grpc_payments
//! ```

mod api;

use api::{charge, charge_method, ChargeReply, ChargeRequest, Payments, PaymentsClient};
use idemkv::{Config, Store};
use idemkv_tonic::{Attempt, Idempotency, Method};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The service: its ledger (a count of charges here), the face, and the
/// guarded method.
struct PaymentsService {
    charges: Arc<AtomicU64>,
    idempotency: Idempotency<Store>,
    charge: Method<ChargeRequest>,
}

impl Payments for PaymentsService {
    async fn charge(&self, request: Request<ChargeRequest>) -> Result<Response<ChargeReply>, Status> {
        let charges = Arc::clone(&self.charges);
        self.idempotency
            .unary(&self.charge, request, move |request| async move {
                let recovered = request.extensions().get::<Attempt>().is_some_and(|attempt| attempt.recovered);
                if recovered {
                    // An earlier run stopped half-way: look the charge up
                    // before making it again (a real ledger would).
                    println!("  (recovered: an earlier attempt was cut short)");
                }
                let charge = request.into_inner();
                if charge.amount_cents <= 0 {
                    // Validation: nothing happened, the key is freed.
                    return Err(Status::invalid_argument("amount_cents must be positive"));
                }
                let number = charges.fetch_add(1, Ordering::SeqCst) + 1;
                let mut reply =
                    Response::new(ChargeReply { charge_id: format!("ch_{number}"), amount_cents: charge.amount_cents });
                reply
                    .metadata_mut()
                    .insert("x-ledger-entry", number.to_string().parse().map_err(|_| Status::internal("metadata"))?);
                Ok(reply)
            })
            .await
    }
}

fn show(what: &str, answer: &Result<Response<ChargeReply>, Status>) {
    match answer {
        Ok(reply) => {
            let replayed = reply.metadata().get(idemkv_tonic::REPLAYED_METADATA).and_then(|value| value.to_str().ok());
            println!("{what}: OK {:?}, replayed: {}", reply.get_ref(), replayed.unwrap_or("no"));
        }
        Err(status) => println!("{what}: {:?} {}", status.code(), status.message()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path(), Config::new())?;
    let idempotency = Idempotency::new(store, |metadata, _| Some(metadata.get("x-account")?.as_bytes().to_vec()));
    let charges = Arc::new(AtomicU64::new(0));
    let service = PaymentsService { charges: Arc::clone(&charges), idempotency, charge: charge_method() };
    let (url, _server) = api::serve(service).await?;

    let mut client = PaymentsClient::connect(url).await?;
    let id = "8e03978e-40d5-43e8-bc93-6894a57f9324";
    show("charge 10.00", &client.charge(charge(id, 1000)).await);
    show("the same request again", &client.charge(charge(id, 1000)).await);
    show("the same id, 11.00", &client.charge(charge(id, 1100)).await);
    show("a malformed id", &client.charge(charge("order-1", 1000)).await);
    println!("charges made: {}", charges.load(Ordering::SeqCst));
    Ok(())
}
