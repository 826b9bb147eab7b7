//! `verify` and `proposal.submit`: static checks of an action proposal, and running it
//! with `tools.execute` calls back to the submitting connection.
//!
//! The proposal itself is CAR's `ActionProposal` ([`Proposal`], [`Action`]). Its params
//! field is kept as an object and decoded with [`decode_proposal`], which decodes each
//! action on its own so a request with several malformed actions names every one (the
//! first in the message, all of them in `error.data.issues`); the schema is the typed
//! [`Proposal`]. The results are [`VerifyReport`] and [`ProposalResult`].

use crate::methods::Access;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::fields::Json;

mod shapes;
use super::member::{json, member, req_at, ArgKind::*};
use super::{op, owner, DeadlineClass, Declaration};
pub use shapes::*;

/// An object-valued JSON field.
pub type Object = serde_json::Map<String, Json>;

/// `verify` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct VerifyParams {
    #[schemars(with = "Proposal")]
    pub proposal: Object,
    #[serde(default)]
    pub initial_state: Option<Object>,
    #[serde(default)]
    pub session_id: Option<String>,
}

/// `proposal.submit` params.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct SubmitParams {
    #[schemars(with = "Proposal")]
    pub proposal: Object,
    #[serde(default)]
    pub session_id: Option<String>,
    /// CAR's `RuntimeScope` (`{callerId?, tenantId?, claims?}`): recorded with the proposal;
    /// `tenantId` picks the state partition its actions read and write (`state.*`'s
    /// `tenant_id`).
    #[serde(default)]
    pub scope: Option<Object>,
}

crate::method!(
    /// `verify` → the verification report.
    Verify = op("verify", "check a proposal without running it");
    access: Access::daemon();
    VerifyParams => VerifyReport;
    member("verify_proposal", &[req_at("proposal_json", "proposal", Json)], json())
);
crate::method!(
    /// `proposal.submit` → the execution result. Its typed members (`submit_proposal`,
    /// `execute_proposal`) take tool callbacks and are written by hand in each binding.
    Submit = owner("proposal.submit", "run a proposal, calling tools back on this connection")
        .deadline(DeadlineClass::Proposal);
    access: Access::daemon();
    SubmitParams => ProposalResult
);

pub const DECLARATIONS: &[Declaration] =
    &[Declaration::of::<Verify>(), Declaration::of::<Submit>()];
