//! The memory brake (`[policy] brake_at`, cgroup v2 only): the agent sets the group's `memory.high` at a fraction
//! of its limit, so the kernel throttles a grower's allocations there instead of OOM-killing it at `memory.max`,
//! and the abort has time to land. `memory.max` is never touched.

use serde::Serialize;

/// The brake as the API and the home page show it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BrakeStatus {
    /// `[policy] brake_at`: the fraction of the limit `memory.high` is set at.
    pub at: f64,
    /// The `memory.high` the agent has set, in bytes (None while it could not be set).
    pub high_bytes: Option<u64>,
    /// The group's `memory.high` before the agent set it (`max` or bytes), put back on exit.
    pub previous: String,
    /// Why the brake is not set, when it is not.
    pub error: Option<String>,
}
