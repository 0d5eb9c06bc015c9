//! The renders' own threads: a few, at a lower CPU priority (nice [`NICE`]), so a crowd on the home page slows
//! the page and not the API, the probes and the sampler beside it. A render that panics is an error for its
//! request; its thread carries on.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// The renders' nice value (0 is the agent's own): the kernel gives a thread at nice 10 about a tenth of the CPU
/// time of one at 0 when both want it.
pub const NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// Why a render did not run.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("no render thread could be started: {0}")]
    NoThreads(String),
    #[error("the render failed")]
    Panicked,
    #[error("{0} requests are already waiting for this answer")]
    Busy(usize),
}

/// A fixed set of render threads taking jobs from one queue. Dropping it ends them once the queue is empty.
pub struct Pool {
    jobs: mpsc::Sender<Job>,
    /// Why no thread runs, when none does.
    broken: Option<String>,
}

impl Pool {
    /// Starts `threads` render threads.
    pub fn new(threads: usize) -> Pool {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        let mut broken = None;
        for i in 0..threads {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new().name(format!("render-{i}")).spawn(move || {
                lower_priority();
                loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    match job {
                        Ok(job) => {
                            let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                        }
                        Err(_) => return,
                    }
                }
            });
            match spawned {
                Ok(_) => started += 1,
                Err(e) => broken = Some(e.to_string()),
            }
        }
        Pool { jobs, broken: if started == 0 { broken.or(Some("no threads asked".into())) } else { None } }
    }

    /// Runs `f` on a render thread and waits for its result.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, PoolError> {
        if let Some(why) = &self.broken {
            return Err(PoolError::NoThreads(why.clone()));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.jobs.send(job).map_err(|_| PoolError::NoThreads("the render threads are gone".into()))?;
        rx.await.map_err(|_| PoolError::Panicked)
    }
}

/// A [`Pool`] with a bound on the jobs waiting or running: past it a job is refused at once ([`PoolError::Busy`]),
/// so a crowd on an endpoint costs a refusal each, never a queue that grows with it.
pub struct Gate {
    pool: Pool,
    queued: Arc<AtomicUsize>,
    max: usize,
}

/// Counts a job in [`Gate::queued`] until it has run (or is dropped unrun).
struct Queued(Arc<AtomicUsize>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    /// `threads` threads at nice [`NICE`], at most `max` jobs waiting or running.
    pub fn new(threads: usize, max: usize) -> Gate {
        Gate { pool: Pool::new(threads), queued: Arc::new(AtomicUsize::new(0)), max }
    }

    /// Runs `f` on one of the gate's threads, or refuses it when `max` jobs are waiting or running.
    pub async fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T, PoolError> {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            return Err(PoolError::Busy(self.max));
        }
        // Counted until the job has run, even when the request that asked for it is gone.
        let held = Queued(self.queued.clone());
        self.pool
            .run(move || {
                let _held = held;
                f()
            })
            .await
    }
}

/// Lowers the calling thread's CPU priority to [`NICE`] (on Linux the nice value is per thread). Best effort: a
/// thread left at the agent's priority still renders.
fn lower_priority() {
    // SAFETY: setpriority on our own thread id only changes its nice value.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, own_tid(), NICE);
    }
}

/// The calling thread's id, by the raw system call: the static musl build links libc's `gettid` wrapper as a null
/// weak symbol, and calling it crashed the agent.
fn own_tid() -> libc::id_t {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn jobs_run_at_a_lower_priority_and_a_panic_is_an_error() {
        let pool = Pool::new(1);
        // SAFETY: getpriority on our own thread id reads its nice value.
        let nice = pool.run(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, own_tid()) }).await;
        assert!(nice.expect("ran") >= NICE, "at nice {NICE} or lower (a test run under nice stays there)");
        assert!(matches!(pool.run(|| panic!("boom")).await, Err(PoolError::Panicked)));
        assert_eq!(pool.run(|| 7).await.expect("the thread carries on"), 7);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gate_refuses_past_its_bound_and_counts_a_job_until_it_has_run() {
        let gate = Arc::new(Gate::new(1, 2));
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let first = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.run(move || wait.recv().is_ok()).await })
        };
        let second = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.run(|| 2).await })
        };
        // Both counted before the third comes: were it let in, it would wait behind the first for ever (one
        // thread), so it is also bounded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while gate.queued.load(Ordering::Relaxed) < 2 {
            assert!(std::time::Instant::now() < deadline, "the two jobs were not counted within 60 s");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let third = tokio::time::timeout(std::time::Duration::from_secs(10), gate.run(|| 3)).await;
        assert!(matches!(third, Ok(Err(PoolError::Busy(2)))), "the third is refused at once: {third:?}");
        go.send(()).expect("release the first");
        assert!(first.await.expect("joined").expect("ran"));
        assert_eq!(second.await.expect("joined").expect("ran"), 2);
        assert_eq!(gate.run(|| 4).await.expect("room again"), 4);
    }
}
