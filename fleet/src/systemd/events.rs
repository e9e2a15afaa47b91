//! One task per connection drains systemd's signals (JobRemoved, PropertiesChanged of unit objects) into a
//! broadcast channel. zbus applies backpressure: a signal stream nobody reads stalls the whole connection (method
//! replies included), so no caller ever holds a zbus stream; callers subscribe to the channel instead, where a
//! slow reader only lags.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tracing::{debug, warn};
use zbus::message::Type as MessageType;
use zbus::{Connection, MatchRule, MessageStream, Variant};

use super::error::{Result, SystemdError};
use super::proxies::ManagerProxy;
use super::types::{Reported, UnitChange, unit_name_from_path};

const SYSTEMD: &str = "org.freedesktop.systemd1";
const UNIT_NAMESPACE: &str = "/org/freedesktop/systemd1/unit";
const CAPACITY: usize = 4096;

/// One signal from systemd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    JobRemoved { job: String, unit: String, result: String },
    PropertiesChanged { unit: String, reported: Reported },
}

impl Event {
    pub(crate) fn unit(&self) -> &str {
        match self {
            Event::JobRemoved { unit, .. } | Event::PropertiesChanged { unit, .. } => unit,
        }
    }
}

/// What a `PropertiesChanged` message of a unit object carried ([`Reported`]; empty when its body does not decode).
fn reported(msg: &zbus::Message) -> Reported {
    let body = msg.body();
    match body.deserialize::<(&str, HashMap<&str, Variant<'_>>, Vec<&str>)>() {
        Ok((interface, changed, _)) => Reported::from_signal(interface, changed.iter().map(|(k, v)| (*k, v))),
        Err(e) => {
            debug!(err = %e, "undecodable PropertiesChanged body");
            Reported::default()
        }
    }
}

/// The channel and the task feeding it; the task stops when the last `Systemd` clone is dropped.
pub(crate) struct Events {
    sender: broadcast::Sender<Event>,
    task: JoinHandle<()>,
}

impl Drop for Events {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Events {
    /// Add the match rules (before returning, so nothing after this call is missed) and start draining.
    pub(crate) async fn start(conn: &Connection, manager: &ManagerProxy<'static>) -> Result<Arc<Events>> {
        let mut jobs =
            manager.receive_job_removed().await.map_err(|e| SystemdError::call("AddMatch", "JobRemoved", e))?;
        let rule = MatchRule::builder()
            .msg_type(MessageType::Signal)
            .sender(SYSTEMD)
            .interface("org.freedesktop.DBus.Properties")
            .member("PropertiesChanged")
            .path_namespace(UNIT_NAMESPACE)
            .build()
            .map_err(|e| SystemdError::call("AddMatch", UNIT_NAMESPACE, e))?;
        let mut props = MessageStream::for_match_rule(rule, conn, None)
            .await
            .map_err(|e| SystemdError::call("AddMatch", UNIT_NAMESPACE, e))?;
        let (sender, _) = broadcast::channel(CAPACITY);
        let tx = sender.clone();
        let task = tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    sig = jobs.next() => match sig {
                        Some(sig) => match sig.args() {
                            Ok(a) => Event::JobRemoved {
                                job: a.job().as_str().to_string(),
                                unit: a.unit().clone(),
                                result: a.result().clone(),
                            },
                            Err(e) => { debug!(err = %e, "undecodable JobRemoved"); continue; }
                        },
                        None => break,
                    },
                    msg = props.next() => match msg {
                        Some(Ok(msg)) => {
                            let header = msg.header();
                            match header.path().and_then(|p| unit_name_from_path(p.as_str())) {
                                Some(unit) => Event::PropertiesChanged { unit, reported: reported(&msg) },
                                None => continue,
                            }
                        }
                        Some(Err(e)) => { debug!(err = %e, "bad PropertiesChanged message"); continue; }
                        None => break,
                    },
                };
                // No receivers is fine: nobody is waiting right now.
                let _ = tx.send(event);
            }
            warn!("systemd signal stream ended (D-Bus connection lost)");
        });
        Ok(Arc::new(Events { sender, task }))
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }
}

/// Change notifications for the publisher and the fence: every unit that changed (with the values its signal
/// carried), or `Missed` after falling behind.
pub struct UnitChanges {
    rx: broadcast::Receiver<Event>,
}

impl UnitChanges {
    pub(crate) fn new(rx: broadcast::Receiver<Event>) -> Self {
        UnitChanges { rx }
    }

    /// The next change; `None` once the D-Bus connection is gone. Finished jobs are not changes here: a job that
    /// changes a unit's state makes systemd send `PropertiesChanged` too.
    pub async fn recv(&mut self) -> Option<UnitChange> {
        loop {
            return match self.rx.recv().await {
                Ok(Event::PropertiesChanged { unit, reported }) => Some(UnitChange::Unit { name: unit, reported }),
                Ok(Event::JobRemoved { .. }) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => Some(UnitChange::Missed),
                Err(broadcast::error::RecvError::Closed) => None,
            };
        }
    }
}
