//! The CPU backend's threads. Work is cut into tasks that each own whole output rows (never a
//! share of a reduction), so results do not depend on how many threads run them.
//!
//! A decoded token runs ~150 products and attentions of well under a millisecond each, so what
//! a parallel region costs to start and end matters: the workers spin on an epoch counter
//! between regions (as llama.cpp's thread pool does) and sleep only after a while idle, and the
//! calling thread takes tasks too. Natively the workers are OS threads; in the browser each is
//! a Web Worker on the module's shared memory, which the page starts from a `Seat` (the
//! `Spawner` says which); with one thread every task runs inline.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};

/// Spins on the epoch before sleeping: ~100 µs, longer than the serial work between regions.
const SPINS: usize = 1 << 15;

/// One parallel region: its tasks and who is done.
struct Job<'a> {
    task: &'a (dyn Fn(usize) + Sync),
    n_tasks: usize,
}

struct Shared {
    /// The region in progress, or null between regions.
    job: AtomicPtr<Job<'static>>,
    /// The next task index to claim, and tasks finished, of the region in `job`.
    next: AtomicUsize,
    done: AtomicUsize,
    /// Workers between taking `job` and letting go of it.
    inside: AtomicUsize,
    /// Bumped per region: what sleeping or spinning workers watch.
    epoch: AtomicUsize,
    sleepers: AtomicUsize,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

/// A worker's place in a pool: what a started thread runs, until the pool is dropped.
pub struct Seat(Arc<Shared>);

impl Seat {
    /// The worker loop; returns when the pool is dropped.
    pub fn run(self) {
        worker(&self.0)
    }

    /// The seat as a number, to hand to a thread started outside Rust (a Web Worker).
    pub fn into_raw(self) -> usize {
        Arc::into_raw(self.0) as usize
    }

    /// # Safety
    /// `raw` came from `into_raw` and is taken back once.
    pub unsafe fn from_raw(raw: usize) -> Self {
        Self(Arc::from_raw(raw as *const Shared))
    }
}

/// How a pool's workers are started.
#[derive(Clone, Default)]
pub enum Spawner {
    /// OS threads.
    #[default]
    Os,
    /// A function that starts a thread running `Seat::run` (in the browser, a Web Worker on
    /// the module's shared memory); its threads are not joined, only told to stop.
    External(std::rc::Rc<dyn Fn(Seat) -> Result<(), String>>),
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Spawner::Os => "Os",
            Spawner::External(_) => "External",
        })
    }
}

/// Runs tasks on a fixed number of threads: the caller and `n - 1` workers.
pub struct Threads {
    n: usize,
    shared: Arc<Shared>,
    /// One region at a time, whoever calls.
    running: Mutex<()>,
    /// The OS threads, joined on drop.
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Threads {
    /// `n` threads (at least 1); `None` takes every core the machine offers.
    pub fn new(n: Option<usize>, spawner: &Spawner) -> Result<Self, String> {
        let n = n.unwrap_or_else(default_threads).max(1);
        let shared = Arc::new(Shared {
            job: AtomicPtr::new(std::ptr::null_mut()),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            inside: AtomicUsize::new(0),
            epoch: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(n - 1);
        for i in 1..n {
            let seat = Seat(shared.clone());
            let spawned = match spawner {
                Spawner::Os => std::thread::Builder::new().name(format!("radixlm-cpu-{i}")).spawn(move || seat.run()).map(|h| workers.push(h)).map_err(|e| e.to_string()),
                Spawner::External(spawn) => spawn(seat),
            };
            match spawned {
                Ok(()) => {}
                Err(e) => {
                    let pool = Self { n: 1, shared, running: Mutex::new(()), workers };
                    drop(pool);
                    return Err(format!("cannot start {n} CPU threads: {e}"));
                }
            }
        }
        Ok(Self { n, shared, running: Mutex::new(()), workers })
    }

    pub fn count(&self) -> usize {
        self.n
    }

    /// Calls `task(i)` for every `i` in `0..n_tasks`, spread over the threads; returns when
    /// all are done.
    pub fn run(&self, n_tasks: usize, task: impl Fn(usize) + Sync) {
        if self.n == 1 || n_tasks <= 1 {
            (0..n_tasks).for_each(task);
            return;
        }
        let _running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        let job = Job { task: &task, n_tasks };
        s.next.store(0, SeqCst);
        s.done.store(0, SeqCst);
        // SAFETY: `job` outlives every use of the pointer: it is cleared below and this call
        // returns only once no worker is inside the region.
        s.job.store(&job as *const Job as *mut Job<'static>, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        if s.sleepers.load(SeqCst) > 0 {
            let _guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        claim(s, &job);
        while s.done.load(SeqCst) < n_tasks {
            std::hint::spin_loop();
        }
        s.job.store(std::ptr::null_mut(), SeqCst);
        while s.inside.load(SeqCst) > 0 {
            std::hint::spin_loop();
        }
    }
}

/// Takes the region's tasks until none is left.
fn claim(s: &Shared, job: &Job) {
    loop {
        let i = s.next.fetch_add(1, SeqCst);
        if i >= job.n_tasks {
            return;
        }
        (job.task)(i);
        s.done.fetch_add(1, SeqCst);
    }
}

fn worker(s: &Shared) {
    let mut seen = s.epoch.load(SeqCst);
    loop {
        // Wait for a new region: spin, then sleep.
        let mut spins = 0;
        while s.epoch.load(SeqCst) == seen && !s.shutdown.load(SeqCst) {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            let guard = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, SeqCst);
            let _guard = s.wake.wait_while(guard, |_| s.epoch.load(SeqCst) == seen && !s.shutdown.load(SeqCst)).unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_sub(1, SeqCst);
        }
        if s.shutdown.load(SeqCst) {
            return;
        }
        s.inside.fetch_add(1, SeqCst);
        seen = s.epoch.load(SeqCst);
        let job = s.job.load(SeqCst);
        if !job.is_null() {
            // SAFETY: non-null only while `Threads::run` holds the job alive, and it waits for
            // `inside` to drop to zero before letting it go.
            claim(s, unsafe { &*job });
        }
        s.inside.fetch_sub(1, SeqCst);
    }
}

impl Drop for Threads {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, SeqCst);
        {
            let _guard = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A pointer tasks write through, each to output elements no other task writes.
#[derive(Clone, Copy)]
pub struct Disjoint<T>(*mut T, usize);

// SAFETY: tasks given the same `Disjoint` write disjoint elements (each caller documents its
// partition), and `Threads::run` returns only after every task is done.
unsafe impl<T: Send> Send for Disjoint<T> {}
unsafe impl<T: Send> Sync for Disjoint<T> {}

impl<T> Disjoint<T> {
    pub fn new(slice: &mut [T]) -> Self {
        Self(slice.as_mut_ptr(), slice.len())
    }

    /// Element `i`, which only the calling task writes while the tasks run.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub fn at(&self, i: usize) -> &mut T {
        assert!(i < self.1, "Disjoint: index {i} out of {}", self.1);
        // SAFETY: in bounds (checked); exclusive by the partition above.
        unsafe { &mut *self.0.add(i) }
    }

    /// Elements `start..start + len`, which only the calling task writes while the tasks run.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub fn range(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.1, "Disjoint: range {start}+{len} out of {}", self.1);
        // SAFETY: in bounds (checked); exclusive by the partition above.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}
