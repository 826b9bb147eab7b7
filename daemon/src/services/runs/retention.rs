//! How long runs are kept, and `runs.delete`.
//!
//! CAR keeps every run and its trace forever, so one caller starting runs in a loop grows
//! the database without bound. Here an **ended** run (completed, cancelled or incomplete)
//! is kept while it is among its owner's newest [`MAX_ENDED_RUNS_PER_OWNER`] ended runs and
//! younger than [`MAX_ENDED_RUN_AGE`] (ties in the end time go to the later-started run);
//! older ones are deleted with their trace and
//! cancellation receipts when that owner next starts a run (inside the same transaction,
//! so the count never overshoots). A run's owner is the principal that started it (each
//! agent, or the user for every non-agent session), so one agent's runs never push out
//! another's. Running runs are never pruned.
//!
//! `runs.delete {run_id}` deletes one ended run at once: the identity that started it or a
//! host session may; for anyone else, as for an unknown id, it answers `deleted: false`.

use std::time::Duration;

use car_proto::errors::RpcError;
use car_proto::methods::runs::{self as m, DeleteParams, DeleteReply};
use rusqlite::{params, Connection};
use serde_json::json;

use super::sees;
use crate::handler::{Call, Routes};
use crate::state::run_records::{is_terminal, load};
use crate::state::store::db_error;
use car_proto::clock::now_ms;

/// Ended runs kept per owner.
pub const MAX_ENDED_RUNS_PER_OWNER: usize = 1000;
/// Ended runs older than this (since they ended) are deleted.
pub const MAX_ENDED_RUN_AGE: Duration = Duration::from_secs(30 * 24 * 60 * 60);

pub fn register(routes: &mut Routes) {
    routes.add::<m::Delete, _, _>(delete);
}

/// Deletes run `run_id`'s rows (trace, cancellations, the run).
fn delete_rows(c: &Connection, run_id: &str) -> Result<(), RpcError> {
    for sql in [
        "DELETE FROM run_trace WHERE run_id = ?1",
        "DELETE FROM run_cancellations WHERE run_id = ?1",
        "DELETE FROM runs WHERE run_id = ?1",
    ] {
        c.execute(sql, params![run_id]).map_err(db_error)?;
    }
    Ok(())
}

/// Deletes `owner`'s ended runs beyond the count and age limits; returns how many.
pub(super) fn prune(c: &Connection, owner: &str) -> Result<usize, RpcError> {
    let oldest_kept_ms = now_ms().saturating_sub(MAX_ENDED_RUN_AGE.as_millis() as i64);
    let ids: Vec<String> = {
        let mut stmt = c
            .prepare(
                "SELECT run_id FROM (
                     SELECT run_id, COALESCE(completed_ms, started_ms) AS ended,
                            ROW_NUMBER() OVER (ORDER BY COALESCE(completed_ms, started_ms) DESC, rowid DESC) AS n
                     FROM runs WHERE owner = ?1 AND status != 'running')
                 WHERE n > ?2 OR ended < ?3",
            )
            .map_err(db_error)?;
        let rows = stmt
            .query_map(
                params![owner, MAX_ENDED_RUNS_PER_OWNER as i64, oldest_kept_ms],
                |r| r.get(0),
            )
            .map_err(db_error)?;
        rows.collect::<Result<_, _>>().map_err(db_error)?
    };
    for id in &ids {
        delete_rows(c, id)?;
    }
    if !ids.is_empty() {
        tracing::debug!(owner, pruned = ids.len(), "old ended runs deleted");
    }
    Ok(ids.len())
}

/// `runs.delete {run_id}` → `{run_id, deleted}`.
async fn delete(call: Call, p: DeleteParams) -> Result<DeleteReply, RpcError> {
    let run_id = p.run_id.into_string();
    let identity = call.session.identity();
    let id = run_id.clone();
    let deleted = call
        .state
        .data
        .store
        .run(move |c| {
            let tx = c.transaction().map_err(db_error)?;
            let Some((owner, run)) = load(&tx, &id)?.filter(|(owner, _)| sees(&identity, owner))
            else {
                return Ok(false);
            };
            let status = run.status.as_str();
            if !is_terminal(status) {
                return Err(RpcError::invalid_params(format!(
                    "run_id: run {id:?} is {status}: cancel or complete it before deleting it"
                ))
                .with_data(json!({"reason": "run_running"})));
            }
            delete_rows(&tx, &id)?;
            tx.commit().map_err(db_error)?;
            tracing::info!(run = %id, %owner, "run deleted");
            Ok(true)
        })
        .await?;
    Ok(DeleteReply { run_id, deleted })
}
