//! One sample's data ([`snapshot`]) and the pure decision taken on it ([`policy`]): no IO.

pub mod policy;
pub mod snapshot;
