//! The signals fleetd acts on (spec §1.5), as one stream of events.

use tokio::signal::unix::{Signal, SignalKind, signal};

/// What a signal asks fleetd to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// SIGTERM or SIGINT: stop components, purge this machine (or leave it for adoption when systemd is restarting fleet,
    /// see [`super::adoption`]), exit 0.
    Shutdown,
    /// SIGUSR2: stop components and exit 0, leaving every unit running for the next fleetd process to adopt.
    Restart,
    /// SIGHUP: re-read the configuration and restart the components on the same API listeners.
    Reload,
    /// SIGUSR1: dump internal state to stdout.
    Dump,
}

pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// The next signal's request.
    pub async fn next(&mut self) -> Request {
        tokio::select! {
            _ = self.term.recv() => Request::Shutdown,
            _ = self.int.recv() => Request::Shutdown,
            _ = self.hup.recv() => Request::Reload,
            _ = self.usr1.recv() => Request::Dump,
            _ = self.usr2.recv() => Request::Restart,
        }
    }
}
