//! A `tracing` layer that keeps every span of the names it is given, in
//! the order made, with its fields as recorded (at creation and later),
//! and counts each line logged in it: a line counts in the nearest span
//! of those names around it. The span tests of the HTTP layer and of the
//! calling side read what a request's or a call's span held.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span as seen: its name, its fields, and the lines logged in it by
/// message.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub name: &'static str,
    pub fields: BTreeMap<String, String>,
    lines: BTreeMap<String, usize>,
}

impl Seen {
    /// The field's value, as recorded (`Debug` of a non-string).
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// How many lines with this message were logged in the span.
    pub fn lines(&self, message: &str) -> usize {
        self.lines.get(message).copied().unwrap_or(0)
    }
}

/// Every span kept, in the order made; the open ones by id.
#[derive(Default)]
struct Kept {
    seen: Vec<Seen>,
    open: HashMap<u64, usize>,
}

/// The layer: install it in a `tracing_subscriber::registry()`, read what
/// it kept with [`KeepSpans::seen`].
#[derive(Clone)]
pub struct KeepSpans {
    names: &'static [&'static str],
    kept: Arc<Mutex<Kept>>,
}

impl KeepSpans {
    /// A layer that keeps the spans named one of `names`.
    pub fn new(names: &'static [&'static str]) -> Self {
        KeepSpans { names, kept: Arc::default() }
    }

    /// The spans named `name`, in the order made.
    pub fn seen(&self, name: &str) -> Vec<Seen> {
        self.kept.lock().expect("spans").seen.iter().filter(|span| span.name == name).cloned().collect()
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for KeepSpans {
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, _context: Context<'_, S>) {
        let name = attributes.metadata().name();
        if !self.names.contains(&name) {
            return;
        }
        let mut kept = self.kept.lock().expect("spans");
        let mut seen = Seen { name, ..Seen::default() };
        attributes.record(&mut Fields(&mut seen.fields));
        kept.seen.push(seen);
        let index = kept.seen.len() - 1;
        kept.open.insert(id.into_u64(), index);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _context: Context<'_, S>) {
        let mut kept = self.kept.lock().expect("spans");
        if let Some(&index) = kept.open.get(&id.into_u64()) {
            values.record(&mut Fields(&mut kept.seen[index].fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, context: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let Some(message) = fields.remove("message") else { return };
        let nearest =
            context.event_scope(event).and_then(|mut scope| scope.find(|span| self.names.contains(&span.name())));
        if let Some(span) = nearest {
            let mut kept = self.kept.lock().expect("spans");
            if let Some(&index) = kept.open.get(&span.id().into_u64()) {
                *kept.seen[index].lines.entry(message).or_default() += 1;
            }
        }
    }

    fn on_close(&self, id: Id, _context: Context<'_, S>) {
        self.kept.lock().expect("spans").open.remove(&id.into_u64());
    }
}
