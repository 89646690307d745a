//! With the `tracing` feature, creating and destroying handle boxes emits `tracing` events
//! (target `handles`): checked with a minimal hand-written subscriber that records each
//! event's fields.
#![cfg(feature = "tracing")]

use std::fmt;
use std::sync::{Arc, Mutex};

use handles_core::ResourceHandle;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

fn forget(_: u64, _: &Thing) -> Result<(), std::io::Error> {
    Ok(())
}

#[derive(ResourceHandle)]
#[handle(raw = u64, delete = forget)]
struct Thing {}

/// One recorded event: its target and its fields, formatted.
#[derive(Debug, Clone)]
struct Seen {
    target: String,
    fields: Vec<(String, String)>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .push((field.name().to_string(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_string(), value.to_string()));
    }
}

/// Records every event; has no spans.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Vec::new();
        event.record(&mut Fields(&mut fields));
        self.0.lock().unwrap().push(Seen {
            target: event.metadata().target().to_string(),
            fields,
        });
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn create_and_destroy_emit_events() {
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || {
        // SAFETY: 41 is a made-up id that nothing else owns; `forget` deletes nothing.
        let owned = unsafe { ThingHandle::from_raw(41, Thing {}) };
        let clone = owned.clone();
        drop((owned, clone));
        // SAFETY: the id is plain data, valid for as long as anyone likes.
        let borrowed = unsafe { ThingHandle::from_raw_borrowed(42, Thing {}) };
        drop(borrowed);
        // SAFETY: as above.
        let with_owner =
            unsafe { ThingHandle::from_raw_with_owner(43, Thing {}, String::from("owner")) };
        drop(with_owner);
    });
    let seen = recorder.0.lock().unwrap().clone();
    let summary: Vec<(String, String, String)> = seen
        .iter()
        .map(|event| {
            assert_eq!(event.target, "handles");
            assert_eq!(event.field("resource"), Some("Thing"));
            (
                event.field("message").unwrap_or_default().to_string(),
                event.field("raw").unwrap_or_default().to_string(),
                event.field("ownership").unwrap_or_default().to_string(),
            )
        })
        .collect();
    let expected = [
        ("create", "41", "Owned"),
        ("destroy", "41", "Owned"),
        ("create", "42", "Borrowed"),
        ("destroy", "42", "Borrowed"),
        ("create", "43", "WithOwner"),
        ("destroy", "43", "WithOwner"),
    ];
    let expected: Vec<(String, String, String)> = expected
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
    assert_eq!(summary, expected, "events: {seen:#?}");
    // The clone made no event; the owned box's destroy says its deleter ran.
    assert_eq!(seen[1].field("deleter"), Some("true"));
    assert_eq!(seen[3].field("deleter"), Some("false"));
    assert_eq!(
        seen[4].field("owner"),
        Some(std::any::type_name::<String>())
    );
}
