//! How fast the guard reacts to memory growing faster than its sampling interval: the agent signalling a grower
//! (`agent`) and the front door cancelling a growing request (`run`), both before the kernel's OOM killer acts; the
//! agent's last resort, a SIGKILL for the process that cannot obey (`kill`; under `monitor run`, `last_resort`).
//! The tests take turns (`TURNS`): each measures time and wants the machine to itself.

mod agent;
mod kill;
mod last_resort;
mod obeyed;
mod recycle;
mod run;

/// Held by each test for its whole run.
static TURNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits for this test's turn.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURNS.lock().unwrap_or_else(|e| e.into_inner())
}
