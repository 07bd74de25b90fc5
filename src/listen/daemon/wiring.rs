//! The main loop's plumbing: the signals it answers, the channels to its tasks, its timers and
//! systemd's watchdog.

use super::*;

/// The signals the listener answers: SIGTERM and SIGINT stop it, SIGHUP reloads.
pub(super) struct Signals {
    pub(super) term: Signal,
    pub(super) int: Signal,
    pub(super) hup: Signal,
}

impl Signals {
    pub(super) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next SIGTERM or SIGINT while stopping; which of the two.
    pub(super) async fn second(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// The channels between the main loop and its tasks (the socket, texts refreshes, the cycle).
pub(super) struct Wiring {
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) params: watch::Sender<SocketParams>,
    pub(super) events_tx: mpsc::Sender<SocketEvent>,
    pub(super) events: mpsc::Receiver<SocketEvent>,
    pub(super) texts_tx: mpsc::Sender<Result<Loaded, Missing>>,
    pub(super) texts: mpsc::Receiver<Result<Loaded, Missing>>,
    pub(super) socket: JoinHandle<()>,
    /// The cycle running now; one at a time, ever.
    pub(super) cycle: Option<JoinHandle<CycleReport>>,
    /// Hears from the running cycle when it hands its run to the supervisor.
    pub(super) run_starting: Option<oneshot::Receiver<RunStarting>>,
    /// The runtime check under way (`recovery`), at most one.
    pub(super) runtime_check: Option<JoinHandle<Result<String, crate::runtime::check::NotUsable>>>,
}

impl Wiring {
    /// Makes the channels and starts the socket task.
    pub(super) fn start(params: SocketParams) -> Wiring {
        let (shutdown, _) = watch::channel(false);
        let (params, _) = watch::channel(params);
        let (events_tx, events) = mpsc::channel::<SocketEvent>(256);
        let (texts_tx, texts) = mpsc::channel(4);
        let socket = tokio::spawn(socket::run(
            params.subscribe(),
            events_tx.clone(),
            shutdown.subscribe(),
        ));
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
            runtime_check: None,
        }
    }

    pub(super) fn restart_socket(&mut self) {
        self.socket = tokio::spawn(socket::run(
            self.params.subscribe(),
            self.events_tx.clone(),
            self.shutdown.subscribe(),
        ));
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

/// The main loop's timers. None of them ticks while the listener is idle and connected (the
/// texts refresh is daily, the key check runs only while the key is refused, and systemd's
/// watchdog is pinged on the server's heartbeats).
pub(super) struct Timers {
    pub(super) texts: Interval,
    pub(super) key: Interval,
    /// systemd's watchdog, pinged at half its interval when it is on, unless a turn of the loop
    /// pinged it since (see [`Timers::turned`]).
    pub(super) watchdog: Option<Watchdog>,
}

/// systemd's watchdog (`WatchdogSec=` in the unit): a ping at least every half interval.
pub(super) struct Watchdog {
    pub(super) interval: Interval,
    pub(super) last: tokio::time::Instant,
}

impl Watchdog {
    pub(super) fn ping(&mut self) {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        self.last = tokio::time::Instant::now();
        self.interval.reset();
    }
}

impl Timers {
    pub(super) fn new(scale: TimeScale, notify: bool) -> Timers {
        let every = |d: Duration| {
            let mut i = tokio::time::interval(d);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        };
        let mut texts = every(scale.apply(TEXTS_REFRESH));
        texts.reset();
        let watchdog = notify
            .then(sd_notify::watchdog_enabled)
            .flatten()
            .map(|w| Watchdog {
                interval: tokio::time::interval((w / 2).max(Duration::from_millis(100))),
                last: tokio::time::Instant::now(),
            });
        Timers {
            texts,
            key: every(KEY_CHECK),
            watchdog,
        }
    }

    /// The main loop turned: a watchdog last pinged a quarter of its interval ago or more is
    /// pinged now, and its timer starts over. The server's heartbeat (45 s) turns the loop more
    /// often than the unit's half interval (60 s), so while the socket is up the timer never
    /// fires and the ping costs no wakeup of its own.
    pub(super) fn turned(&mut self) {
        if let Some(w) = self.watchdog.as_mut()
            && w.last.elapsed() >= w.interval.period() / 2
        {
            w.ping();
        }
    }
}

/// The next tick of the watchdog's timer; never when there is no watchdog.
pub(super) async fn watchdog_due(watchdog: &mut Option<Watchdog>) {
    match watchdog.as_mut() {
        Some(w) => {
            w.interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A turn pings a watchdog last pinged half its timer's period ago or more, and the timer
    /// starts over: with turns that often, the timer itself never fires.
    #[tokio::test(start_paused = true)]
    pub(super) async fn a_turn_pings_the_watchdog_once_its_last_ping_is_half_a_period_old() {
        let period = Duration::from_secs(60);
        let mut timers = Timers::new(TimeScale(1.0), false);
        timers.watchdog = Some(Watchdog {
            interval: tokio::time::interval(period),
            last: tokio::time::Instant::now(),
        });
        let last = |t: &Timers| t.watchdog.as_ref().map(|w| w.last);
        let start = last(&timers);
        tokio::time::advance(Duration::from_secs(29)).await;
        timers.turned();
        assert_eq!(last(&timers), start, "too soon");
        tokio::time::advance(Duration::from_secs(1)).await;
        timers.turned();
        let pinged = tokio::time::Instant::now();
        assert_eq!(last(&timers), Some(pinged));
        // The timer was reset by that ping: nothing is due before a whole period from it.
        tokio::time::advance(period - Duration::from_millis(1)).await;
        let due = futures_util::FutureExt::now_or_never(watchdog_due(&mut timers.watchdog));
        assert!(due.is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            futures_util::FutureExt::now_or_never(watchdog_due(&mut timers.watchdog)).is_some()
        );
    }
}
