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
        self.flags.queued = Some(q);
        self.status_file.release();
        self.status_changed();
    }

    /// The run started, or the cycle ended: no longer queued.
    pub(super) fn left_queue(&mut self) {
        if self.flags.queued.take().is_some() {
            self.status_changed();
        }
    }
}
