//! Serving `agent.chat` from JavaScript (CAR's `registerChatHandler`), on the shared
//! client's chat module ([`car_daemon_client::chat`], `Client::serve_chat`).
//!
//! This module owns only the bridge between one process-wide JS handler and the turns the
//! client serves; every rule of a turn (its events, its one terminal event) is the
//! client's:
//!
//! - **Serving.** While a handler is registered every runtime of the process serves `agent.chat`
//!   (the client acks `{accepted: true}` and runs the turn); once it is cleared they stop, so later
//!   `agent.chat` calls are refused (`-32601`).
//! - **Running a turn.** The client runs each turn on its own thread (never a tokio worker). That
//!   thread calls the JS handler through its ThreadsafeFunction (queued, non-blocking for the JS
//!   thread) and waits for the Promise `index.js` wraps it in, so an async handler's turn lasts
//!   until its Promise settles. `paramsJson` is the turn's `agent.chat` params: `{session_id,
//!   prompt, stream?, model?, attachments?, goal?, context?}`. Turns of different sessions may
//!   interleave (the JS thread runs them as their awaits allow).
//! - **Events.** The handler streams with `chatEvent(sessionId, kind, delta?)`, the ordinary
//!   generated member: the shared client routes an `agent.chat.event` call for a turn it is serving
//!   into that turn (see `car_daemon_client::chat`), so it must go through the runtime the turn
//!   arrived on.
//! - **Ending.** The bridge hands the client the handler's outcome: `Ok("")` once its Promise
//!   resolved (the binding does not look at the events, so it has no text of its own),
//!   `Err("<name>: <message>")` when it threw or rejected. The client sends the one terminal event:
//!   the first `done` / `error` the handler sent with `chatEvent` (whatever it did after), else
//!   `error {error}` when it threw, else `done {finish_reason: "stop", text: ""}`; a turn the host
//!   cancelled ends `done {finish_reason: "cancelled"}`.
//!
//! Locks here guard single slot operations; no JS runs under one.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use car_daemon_client::{ChatHandler, ChatParams, ChatTurnContext, Client};

use crate::callbacks::{self, JsHandler};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The registered handler (wrapped by `index.js`: it resolves to an envelope).
static HANDLER: RwLock<Option<Arc<JsHandler>>> = RwLock::new(None);
/// Every runtime's client, to start or stop serving when the handler changes.
static CLIENTS: Mutex<Vec<Weak<Client>>> = Mutex::new(Vec::new());

fn has_handler() -> bool {
    HANDLER.read().unwrap_or_else(|e| e.into_inner()).is_some()
}

fn apply(client: &Client, serving: bool) {
    if serving {
        client.serve_chat(JsChat);
    } else {
        client.stop_serving_chat();
    }
}

/// Registers a new runtime's client: it serves chat now if a handler is set.
pub fn track(client: &Arc<Client>) {
    let mut clients = lock(&CLIENTS);
    clients.retain(|c| c.strong_count() > 0);
    clients.push(Arc::downgrade(client));
    if has_handler() {
        apply(client, true);
    }
}

/// Sets (`Some`) or clears (`None`) the handler and starts or stops serving everywhere.
pub fn set_handler(handler: Option<JsHandler>) {
    let serving = handler.is_some();
    let clients = lock(&CLIENTS);
    let old = {
        let mut slot = HANDLER.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *slot, handler.map(Arc::new))
    };
    for client in clients.iter().filter_map(Weak::upgrade) {
        apply(&client, serving);
    }
    drop(clients);
    // Released outside the locks.
    drop(old);
}

/// A turn's `agent.chat` params as the handler gets them.
fn params_json(p: &ChatParams) -> String {
    p.to_json().to_string()
}

/// The chat handler every client serves with while a JS handler is registered.
struct JsChat;

impl ChatHandler for JsChat {
    /// `Ok("")` once the handler's Promise resolved, its error when it threw or rejected:
    /// the client makes the terminal event (see the module docs).
    fn run(&self, turn: &ChatTurnContext) -> Result<String, String> {
        let handler = HANDLER.read().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(handler) = handler else {
            return Err(
                "no chat handler registered: the handler was unregistered before the turn ran"
                    .into(),
            );
        };
        // This is the turn's own thread, outside the runtime: it may block on the JS
        // Promise (the JS thread is never blocked).
        turn.block_on(callbacks::invoke(&handler, params_json(turn.params())))
            .map(|_| String::new())
            .map_err(|e| e.message)
    }
}

#[allow(unsafe_code)] // `#[napi]` expands to unsafe FFI glue; nothing here is hand-written unsafe.
pub mod exports {
    use napi_derive::napi;

    use super::JsHandler;

    /// Sets the process-wide `agent.chat` handler (already wrapped by `index.js`).
    #[napi]
    pub fn set_chat_handler(handler: JsHandler) {
        super::set_handler(Some(handler));
    }

    #[napi]
    pub fn clear_chat_handler() {
        super::set_handler(None);
    }
}
