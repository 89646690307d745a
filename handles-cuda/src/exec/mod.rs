//! Execution resources: contexts, streams, events, green contexts, and their recyclers.

pub(crate) mod context;
pub(crate) mod event;
pub(crate) mod event_recycler;
pub(crate) mod green;
pub(crate) mod stream;
pub(crate) mod stream_recycler;
