//! The main loop's plumbing: the channels to its tasks and its timers.

use super::*;
use tracing::Instrument;

/// The channels between the main loop and its tasks (the socket, texts refreshes, the cycle).
pub(super) struct Wiring {
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) params: watch::Sender<SocketParams>,
    pub(super) events_tx: mpsc::Sender<SocketEvent>,
    pub(super) events: mpsc::Receiver<SocketEvent>,
    /// Boxed: a channel allocates room for 32 of its items at once, and a profile of a host
    /// should not hold 10 KB for a refresh a day.
    pub(super) texts_tx: mpsc::Sender<Box<Result<Loaded, Missing>>>,
    pub(super) texts: mpsc::Receiver<Box<Result<Loaded, Missing>>>,
    pub(super) socket: JoinHandle<()>,
    /// The cycle running now; one at a time, ever.
    pub(super) cycle: Option<JoinHandle<CycleReport>>,
    /// Hears from the running cycle when it hands its run to the supervisor.
    pub(super) run_starting: Option<oneshot::Receiver<RunStarting>>,
    /// The running cycle's waits for a `429 Retry-After` (`Daemon::on_cycle_wait`).
    pub(super) cycle_waits_tx: mpsc::Sender<cycle::CycleWait>,
    pub(super) cycle_waits: mpsc::Receiver<cycle::CycleWait>,
    /// Hears from the running cycle when its run waits for a slot (`listen::admission`).
    pub(super) queued: Option<oneshot::Receiver<super::super::admission::Queued>>,
    /// The runtime check under way (`runtime`), at most one.
    pub(super) runtime_check: Option<JoinHandle<Result<String, crate::runtime::check::NotUsable>>>,
}

impl Wiring {
    /// Makes the channels and starts the socket task.
    pub(super) fn start(params: SocketParams) -> Wiring {
        let (shutdown, _) = watch::channel(false);
        let (params, _) = watch::channel(params);
        let (events_tx, events) = mpsc::channel::<SocketEvent>(256);
        let (texts_tx, texts) = mpsc::channel(4);
        let (cycle_waits_tx, cycle_waits) = mpsc::channel(4);
        let socket = tokio::spawn(
            socket::run(params.subscribe(), events_tx.clone(), shutdown.subscribe())
                .in_current_span(),
        );
        Wiring {
            shutdown,
            params,
            events_tx,
            events,
            texts_tx,
            texts,
            socket,
            cycle: None,
            run_starting: None,
            cycle_waits_tx,
            cycle_waits,
            queued: None,
            runtime_check: None,
        }
    }

    pub(super) fn restart_socket(&mut self) {
        self.socket = tokio::spawn(
            socket::run(
                self.params.subscribe(),
                self.events_tx.clone(),
                self.shutdown.subscribe(),
            )
            .in_current_span(),
        );
    }

    /// Lets the socket task close with 1000 and end, answering its wakes meanwhile so it is
    /// never stuck waiting on the main loop; at most 5 s.
    pub(super) async fn close_socket(self) {
        let Wiring {
            events_tx,
            mut events,
            socket,
            ..
        } = self;
        drop(events_tx);
        let drain = async {
            while let Some(ev) = events.recv().await {
                if let SocketEvent::Wake { registered, .. } = ev {
                    drop(registered);
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(socket, drain)
        })
        .await;
    }
}

/// The main loop's timers. Neither ticks while the listener is idle and connected (the texts
/// refresh is daily, the key check runs only while the key is refused).
pub(super) struct Timers {
    pub(super) texts: Interval,
    pub(super) key: Interval,
}

impl Timers {
    pub(super) fn new(scale: config::TestTimeScale) -> Timers {
        let every = |d: Duration| {
            let mut i = tokio::time::interval(d);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        };
        let mut texts = every(scale.apply(TEXTS_REFRESH));
        texts.reset();
        Timers {
            texts,
            key: every(KEY_CHECK),
        }
    }
}
