//! What orders a free after its uses: the streams a buffer was used on, and the contexts.

pub(crate) mod contexts_used;
pub(crate) mod contexts_used_protocol;
pub(crate) mod stream_order;
pub(crate) mod stream_order_protocol;
