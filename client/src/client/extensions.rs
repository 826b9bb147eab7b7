//! What features built on the transport keep per client, without the transport knowing
//! them: state by type ([`Extensions`]: the chat turns in flight, what the agent loop
//! registered on which connection) and local routes ([`LocalRoutes`]: a method a feature
//! answers in this process instead of sending it, such as `agent.chat.event` while that
//! session's turn runs here). `Client` checks local routes in `call_with` / `notify`
//! through one generic hook; it names no feature.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

/// Per-client state, one value per type, created on first use.
#[derive(Default)]
pub(crate) struct Extensions(Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Extensions {
    /// The client's `T`, created with `T::default()` on first use.
    pub(crate) fn get<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let value = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(T::default()))
            .clone();
        drop(map);
        value
            .downcast::<T>()
            .expect("an extension is stored under its own type")
    }
}

/// A local route: true when it took the call (which then returns `null` unsent).
pub(crate) type LocalRoute = Arc<dyn Fn(&Value) -> bool + Send + Sync>;

/// Methods answered in this process when their route takes the params.
#[derive(Default)]
pub(crate) struct LocalRoutes {
    /// Set once any route exists: the common case (none) costs one atomic load a call.
    any: AtomicBool,
    routes: RwLock<HashMap<&'static str, LocalRoute>>,
}

impl LocalRoutes {
    /// Installs (or replaces) the route for `method`.
    pub(crate) fn set(&self, method: &'static str, route: LocalRoute) {
        self.routes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(method, route);
        self.any.store(true, Ordering::Release);
    }

    /// Whether a local route took `method` with `params`. The route runs outside the lock.
    pub(crate) fn take(&self, method: &str, params: &Value) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        let route = self
            .routes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(method)
            .cloned();
        route.is_some_and(|route| route(params))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_is_one_value_per_type_and_a_route_takes_only_what_it_says() {
        let ext = Extensions::default();
        let a = ext.get::<Mutex<Vec<u8>>>();
        a.lock().unwrap().push(1);
        assert_eq!(*ext.get::<Mutex<Vec<u8>>>().lock().unwrap(), vec![1]);
        assert_eq!(*ext.get::<Mutex<String>>().lock().unwrap(), "");

        let routes = LocalRoutes::default();
        assert!(!routes.take("x", &Value::Null));
        routes.set("x", Arc::new(|p: &Value| p == &Value::Bool(true)));
        assert!(routes.take("x", &Value::Bool(true)));
        assert!(!routes.take("x", &Value::Bool(false)));
        assert!(!routes.take("y", &Value::Bool(true)));
    }
}
