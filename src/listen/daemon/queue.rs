//! A run waiting for a slot of the process (`listen::admission`, `listen --all`): the status
//! says `queued`, with its place and the slots in `detail`, from when the cycle says so until
//! its run starts or the cycle ends.

use super::*;
use crate::listen::admission::{Queued, Ticket};

impl Daemon {
    /// The starting cycle's way to a slot; the word that it queued comes to `queued_rx`.
    pub(super) fn ticket(&mut self) -> Option<Ticket> {
        let (admission, who) = self.admission.as_ref()?;
        let (tx, rx) = oneshot::channel();
        self.queued_rx = Some(rx);
        Some(Ticket {
            admission: admission.clone(),
            who: *who,
            queued: Some(tx),
        })
    }

    /// The cycle's run waits: shown now (a cycle on its way to its run holds the status back;
    /// a wait is no longer on that way).
    pub(super) fn on_queued(&mut self, q: Queued) {
        self.status.detail = Some(queued_detail(&q));
        self.flags.queued = Some(q);
        self.status_hold.release();
        self.status_changed();
    }

    /// The run started, or the cycle ended: no longer queued.
    pub(super) fn left_queue(&mut self) {
        if let Some(q) = self.flags.queued.take() {
            if self.status.detail.as_deref() == Some(queued_detail(&q).as_str()) {
                self.status.detail = None;
            }
            self.status_changed();
        }
    }
}

fn queued_detail(q: &Queued) -> String {
    format!(
        "waiting for a run slot: place {} in the queue when it joined, {} of {} runs going",
        q.place, q.running, q.max
    )
}
