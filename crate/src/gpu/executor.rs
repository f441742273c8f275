//! A minimal executor for the CLI and tests: polls the future with a no-op waker and lets the
//! device make progress (and fire `map_async` callbacks) between polls.

use super::Gpu;
use std::future::Future;
use std::task::{Context, Poll, Waker};

/// Runs `f` to completion on this thread.
pub fn block_on<F: Future>(gpu: &Gpu, f: F) -> F::Output {
    block_on_device(Some(gpu), f)
}

/// Runs `f` to completion on this thread, polling `gpu` (where there is one) between polls.
pub fn block_on_device<F: Future>(gpu: Option<&Gpu>, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        match gpu {
            // An error here means the device was lost; the pending future then resolves with
            // its own error (the map callback reports it), so keep polling.
            Some(gpu) => {
                let _ = gpu.device.poll(wgpu::PollType::Wait { submission_index: None, timeout: None });
            }
            None => std::thread::yield_now(),
        }
    }
}

/// Opens a device natively. wgpu-core resolves adapter and device requests without waiting on
/// the GPU, so polling the future until ready (there is no device to poll yet) is enough.
pub fn open(policy: super::LimitsPolicy) -> Result<Gpu, super::GpuError> {
    let mut f = std::pin::pin!(Gpu::new(policy));
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(out) = f.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::yield_now();
    }
}
