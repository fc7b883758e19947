//! A task of the store's own (the checkpointer, the watch on the database's files) that runs
//! beside its callers until the store closes.

use std::future::Future;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running task and the signal that stops it.
#[derive(Debug)]
pub(crate) struct Background {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Background {
    /// Runs `work`, which ends when its receiver fires (on [`Self::stop`], or when the handle
    /// is dropped).
    pub(crate) fn spawn<F>(work: impl FnOnce(oneshot::Receiver<()>) -> F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel();
        Self {
            stop,
            task: tokio::spawn(work(stopped)),
        }
    }

    /// Stops it and waits until it has ended.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
