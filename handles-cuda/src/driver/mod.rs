//! The ground floor: loading the driver, calling it, the one context scope, and capture state.
//! Knows no handle type.

pub(crate) mod call;
pub(crate) mod capture;
pub(crate) mod current;
pub(crate) mod load;
