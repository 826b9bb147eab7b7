//! Serving `agent.chat` from Python (CAR's `register_chat_handler`), on the shared client's
//! chat module ([`car_daemon_client::chat`], `Client::serve_chat`).
//!
//! This module owns only the bridge between one process-wide Python handler and the turns
//! the client serves; every rule of a turn (its events, its one terminal event) is the
//! client's:
//!
//! - **Serving.** While a handler is registered, every `NativeClient` of this process serves
//!   `agent.chat` (the client acks `{accepted: true}` and runs the turn); once it is cleared they
//!   stop, so later `agent.chat` calls are refused (`-32601`), as CAR's `unregister_chat_handler`
//!   promises. The handler slot and the list of clients are locked only by attached threads (see
//!   `process`).
//! - **Running a turn.** The client runs each turn on its own thread (never a tokio worker). That
//!   thread waits, detached, for the process's [`TurnSlot`] (one turn runs the handler at a time,
//!   CAR's rule; a flag and a condvar, no lock held while Python runs; a turn cancelled while it
//!   waits never runs) and then queues the call on the callback hub: a Python-owned worker runs
//!   `handler(params_json)` attached, where it may call any runtime method (each waits with the GIL
//!   released). `params_json` is the turn's `agent.chat` params: `{session_id, prompt, stream?,
//!   model?, attachments?, goal?, context?}`.
//! - **Events.** The handler streams with `chat_event(session_id, kind, delta?)`, the ordinary
//!   generated member: the shared client routes an `agent.chat.event` call for a turn it is serving
//!   into that turn (see `car_daemon_client::chat`), so it must go through the runtime the turn
//!   arrived on.
//! - **Ending.** The bridge hands the client the handler's outcome: `Ok("")` when it returned (the
//!   binding does not look at the events, so it has no text of its own), `Err ("<Type>:
//!   <message>")` when it raised. The client sends the one terminal event: the first `done` /
//!   `error` the handler sent with `chat_event` (whatever it did after), else `error {error}` when
//!   it raised, else `done {finish_reason: "stop", text: ""}`; a turn the host cancelled ends `done
//!   {finish_reason: "cancelled"}` whatever the handler did.
//!
//! The slot is per process ([`TurnSlot`], kept by `process`), so a forked child never
//! touches a lock a thread of its parent held.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use car_daemon_client::{BlockingClient, ChatHandler, ChatParams, ChatTurnContext};
use pyo3::prelude::*;

use crate::hub::{Hub, Kind, Target};
use crate::process::{self, lock};

/// How often a turn waiting for its slot looks whether it was cancelled.
const SLOT_POLL: Duration = Duration::from_millis(100);

/// The registered handler and the clients that serve chat while it is set.
struct Serving {
    handler: Option<Arc<Py<PyAny>>>,
    /// Each client with the pid that built it (a forked child skips its parent's).
    clients: Vec<(u32, Weak<BlockingClient>)>,
}

static SERVING: Mutex<Serving> = Mutex::new(Serving {
    handler: None,
    clients: Vec::new(),
});

/// Starts or stops serving chat on `client`.
fn apply(client: &BlockingClient, serving: bool, hub: &Arc<Hub>, slot: &Arc<TurnSlot>) {
    if serving {
        client.client().serve_chat(PyChat {
            hub: hub.clone(),
            slot: slot.clone(),
        });
    } else {
        client.client().stop_serving_chat();
    }
}

/// Registers a new client of this process: it serves chat now if a handler is set.
pub(crate) fn track(py: Python<'_>, client: &Arc<BlockingClient>) -> PyResult<()> {
    let (_, hub, slot) = process::resources(py)?;
    let pid = std::process::id();
    let mut st = lock(&SERVING);
    st.clients
        .retain(|(p, c)| *p == pid && c.strong_count() > 0);
    st.clients.push((pid, Arc::downgrade(client)));
    if st.handler.is_some() {
        apply(client, true, &hub, &slot);
    }
    Ok(())
}

/// Sets (`Some`) or clears (`None`) the process-wide chat handler and starts or stops
/// serving on every client of this process.
pub(crate) fn set_handler(py: Python<'_>, handler: Option<Py<PyAny>>) -> PyResult<()> {
    let (_, hub, slot) = process::resources(py)?;
    let pid = std::process::id();
    let old = {
        let mut st = lock(&SERVING);
        let serving = handler.is_some();
        let old = std::mem::replace(&mut st.handler, handler.map(Arc::new));
        st.clients
            .retain(|(p, c)| *p == pid && c.strong_count() > 0);
        for client in st.clients.iter().filter_map(|(_, c)| c.upgrade()) {
            apply(&client, serving, &hub, &slot);
        }
        old
    };
    // Released outside the lock.
    drop(old);
    Ok(())
}

/// The registered handler, for the hub job that runs a turn.
pub(crate) fn handler() -> Option<Arc<Py<PyAny>>> {
    lock(&SERVING).handler.clone()
}

/// The one-at-a-time slot of the process's chat turns (CAR's rule: one turn runs the
/// handler at a time).
#[derive(Default)]
pub(crate) struct TurnSlot {
    busy: Mutex<bool>,
    free: Condvar,
}

impl TurnSlot {
    /// Waits (detached) until no other turn runs its handler, then takes the slot (freed
    /// when the guard drops, also on a panic); `None` when `turn` was cancelled (or lost
    /// its connection) first.
    fn enter(&self, turn: &ChatTurnContext) -> Option<Taken<'_>> {
        let mut busy = lock(&self.busy);
        loop {
            if turn.is_cancelled() {
                return None;
            }
            if !*busy {
                *busy = true;
                return Some(Taken(self));
            }
            busy = self
                .free
                .wait_timeout(busy, SLOT_POLL)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// The slot, taken; dropping it frees the slot.
struct Taken<'a>(&'a TurnSlot);

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        *lock(&self.0.busy) = false;
        self.0.free.notify_one();
    }
}

/// A turn's `agent.chat` params as the handler gets them.
fn params_json(p: &ChatParams) -> String {
    p.to_json().to_string()
}

/// The chat handler every client serves with while a Python handler is registered.
struct PyChat {
    hub: Arc<Hub>,
    slot: Arc<TurnSlot>,
}

impl ChatHandler for PyChat {
    /// `Ok("")` when the handler returned, its error when it raised: the client makes the
    /// terminal event (see the module docs).
    fn run(&self, turn: &ChatTurnContext) -> Result<String, String> {
        let Some(_taken) = self.slot.enter(turn) else {
            return Err("the turn was cancelled before its handler ran".into());
        };
        self.hub
            .dispatch(Target::Chat, Kind::Chat, params_json(turn.params()))
            .map(|_| String::new())
            .map_err(|e| e.message)
    }
}
