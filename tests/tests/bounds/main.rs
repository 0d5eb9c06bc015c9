//! The agent's bounds under load: its memory ceiling and `/healthz` deadline while it serves many clients, idle
//! connections, and a group removed under it. A binary of its own, so that no test of another subject loads the
//! machine while these measure; within it, the two loaded tests take turns.

mod agent;
