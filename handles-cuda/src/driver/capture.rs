//! Capture state.
