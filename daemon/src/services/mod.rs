//! Services: one module per contract namespace, with the namespace's name (`services::runs`
//! serves `car_proto::methods::runs`; `tests/layering.rs` checks the two lists match). A
//! service implements its namespace's declared methods as typed functions and registers
//! them in [`routes`]; it never touches a socket: it gets the caller's [`Session`]
//! (identity, negotiated capabilities, reverse calls, notifications) and the shared
//! [`ServerState`] through [`Call`].
//!
//! A service imports [`crate::handler`], [`crate::state`] and [`crate::config`], never
//! another service: what two services share lives in `state`, and one service runs
//! another's method with [`Call::invoke`](crate::handler::Call::invoke), through dispatch.
//!
//! [`Session`]: crate::state::session::Session
//! [`ServerState`]: crate::state::ServerState
//! [`Call`]: crate::handler::Call

mod agent_messages;
mod agent_permissions;
mod agent_supervisor;
mod agents;
mod connectors;
mod debug;
mod declagents;
mod events;
mod goal;
mod host;
mod inference;
mod memory;
pub mod memory_proactive;
mod models;
mod multi;
mod outcomes;
pub mod permission;
mod policy;
pub mod proposal;
mod proposal_checks;
mod replan;
pub mod runs;
pub mod scheduler;
mod secret;
mod server;
mod session;
mod skills;
mod state;
mod supervision;
mod tools;
mod workflow;

use crate::handler::Routes;

/// Every service's routes.
pub fn routes() -> Routes {
    let mut routes = Routes::new();
    for register in [
        server::register,
        session::register,
        state::register,
        memory::register,
        memory_proactive::register,
        skills::register,
        tools::register,
        policy::register,
        proposal_checks::register,
        proposal::register,
        events::register,
        runs::register,
        inference::register,
        models::register,
        outcomes::register,
        host::register,
        agents::register,
        agent_supervisor::register,
        agent_messages::register,
        multi::register,
        workflow::register,
        scheduler::register,
        permission::register,
        agent_permissions::register,
        supervision::register,
        secret::register,
        connectors::register,
        declagents::register,
        goal::register,
        replan::register,
        debug::register,
    ] {
        register(&mut routes);
    }
    routes
}

/// Connection teardown: what services must do when a session ends.
pub async fn on_session_closed(
    session: &crate::state::session::Session,
    state: &std::sync::Arc<crate::state::ServerState>,
) {
    runs::lifecycle::on_session_closed(session, state).await;
    state.agents.chats.on_session_closed(session);
    state.data.declagents.on_host_closed(session.id);
    state.access.consumer_grants.on_session_closed(session.id);
    state.agents.host.on_session_closed(&session.label());
    state.agents.supervision.on_session_closed(session.id);
    if let Some(agent) = session.identity().agent_id {
        state.agents.registry.detach(&agent, session);
    }
}

#[cfg(test)]
mod tests {
    use car_proto::methods::fields::NoParams;
    use car_proto::methods::{self, op, Declaration};

    use crate::dispatch::Dispatch;

    car_proto::method!(
        /// A declaration that exists only in this test.
        Throwaway = op("test.throwaway", "a method declared by a test");
        access: car_proto::methods::Access::daemon();
        NoParams => u64
    );

    static THROWAWAY: Declaration = Declaration::of::<Throwaway>();

    /// Acceptance for "adding a method": one declaration and one route reach dispatch and
    /// `server.schema` with no other edit.
    #[test]
    fn a_new_declaration_reaches_dispatch_and_the_schema() {
        let mut routes = super::routes();
        routes.add::<Throwaway, _, _>(|_, _: NoParams| async { Ok(7u64) });
        let declarations: Vec<&'static Declaration> = methods::active(false)
            .chain(std::iter::once(&THROWAWAY))
            .collect();
        let dispatch = Dispatch::for_declarations(routes, declarations.clone());
        assert_eq!(dispatch.len(), methods::active(false).count() + 1);
        assert!(dispatch.serves("test.throwaway"));
        let doc = car_proto::schema::document(declarations.into_iter());
        let row = doc["methods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "test.throwaway")
            .expect("the schema lists the new method");
        assert_eq!(row["role"], "operator");
        assert!(
            row["params"].is_object() && row["result"]["type"] == "integer",
            "{row}"
        );
        // Without the declaration, the route is dropped: dispatch serves only what is declared.
        let mut routes = super::routes();
        routes.add::<Throwaway, _, _>(|_, _: NoParams| async { Ok(7u64) });
        assert!(!Dispatch::new(routes, false).serves("test.throwaway"));
    }

    /// The same throwaway reaches the access gates through its declaration alone: each
    /// principal gets what `Access::daemon()` on an `op` method says (the real-daemon
    /// access matrix, `tests/access_matrix.rs`, derives every declared method's row the
    /// same way).
    #[tokio::test]
    async fn a_new_declaration_reaches_the_access_gates() {
        use crate::dispatch::Verdict;
        use crate::state::session::{Identity, Session};
        use car_proto::methods::CallerRole;
        use tokio_util::sync::CancellationToken;

        let mut routes = super::routes();
        routes.add::<Throwaway, _, _>(|_, _: NoParams| async { Ok(7u64) });
        let declarations: Vec<&'static Declaration> = methods::active(false)
            .chain(std::iter::once(&THROWAWAY))
            .collect();
        let dispatch = Dispatch::for_declarations(routes, declarations);
        let session = |identity: Option<Identity>| {
            let (outbound, _rx) =
                crate::state::outbound::channel(1 << 20, CancellationToken::new());
            let s = Session::new(
                1,
                "test",
                true,
                outbound,
                CancellationToken::new(),
                CancellationToken::new(),
                None,
            );
            if let Some(identity) = identity {
                s.set_identity(identity);
            }
            s
        };
        let identity = |role: CallerRole, observer: bool| Identity {
            authenticated: true,
            role,
            agent_id: (role == CallerRole::Agent).then(|| "a1".to_string()),
            memory_namespace: None,
            method_allowlist: None,
            observer,
            grant: None,
        };
        let verdict = |s: &Session| dispatch.gate(s, "test.throwaway", &serde_json::json!({}));
        assert!(matches!(
            verdict(&session(None)),
            Verdict::CloseUnauthenticated
        ));
        match verdict(&session(Some(identity(CallerRole::Host, true)))) {
            Verdict::Refuse(e) => assert_eq!(e.data.unwrap()["reason"], "read_only"),
            other => panic!("the observer was let through: {other:?}"),
        }
        for role in [CallerRole::Agent, CallerRole::Operator, CallerRole::Host] {
            assert!(
                matches!(
                    verdict(&session(Some(identity(role, false)))),
                    Verdict::Run(..)
                ),
                "{role:?} is refused an op method"
            );
        }
    }

    #[test]
    fn every_declaration_has_exactly_one_route() {
        let dispatch = crate::dispatch::Dispatch::new(super::routes(), true);
        assert_eq!(dispatch.len(), car_proto::methods::all().count());
        let plain = crate::dispatch::Dispatch::new(super::routes(), false);
        assert_eq!(plain.len(), car_proto::methods::active(false).count());
    }
}
