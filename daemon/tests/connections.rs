//! Many connections (issue 17, "Connections"): 1,000 concurrent authenticated, negotiated,
//! idle connections to one daemon are all served and each answers a call. Memory per idle
//! connection is measured by `scripts/bench-connections` (docs/benchmarks.md), not here:
//! a test must not depend on how busy the machine is.

mod common;

use common::runs::negotiate;
use common::*;
use futures_util::future::join_all;
use serde_json::{json, Value};

const CONNECTIONS: usize = 1000;

/// This test process holds a socket per connection too.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed by pointer.
    #[allow(unsafe_code)]
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max.min(1 << 20);
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

async fn open(d: &Daemon) -> Ws {
    let mut ws = Ws::authed(d).await;
    negotiate(&mut ws, &[]).await;
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_are_all_served_and_answer() {
    raise_open_file_limit();
    let d = Daemon::builder().args(["--idle-timeout", "1h"]).start();
    let mut all: Vec<Ws> = Vec::with_capacity(CONNECTIONS);
    while all.len() < CONNECTIONS {
        let batch = (CONNECTIONS - all.len()).min(100);
        all.extend(join_all((0..batch).map(|_| open(&d))).await);
    }
    let replies = join_all(
        all.iter_mut()
            .map(|ws| ws.call("memory.fact_count", Value::Null)),
    )
    .await;
    let answered = replies.iter().filter(|r| r["result"] == json!(0)).count();
    assert_eq!(answered, CONNECTIONS);
    let status = all[0].call("server.status", Value::Null).await;
    let sessions = status["result"]["sessions"].as_array().unwrap().len();
    assert!(sessions >= CONNECTIONS, "{sessions} sessions listed");
    let negotiated = status["result"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["role"] == "operator")
        .count();
    assert_eq!(negotiated, CONNECTIONS);
}
