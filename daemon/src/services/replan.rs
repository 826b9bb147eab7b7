//! `replan.set_config`: stores the connection's replan loop configuration
//! (`car_proto::methods::replan`); `proposal.submit` runs the loop
//! (`services::proposal::replan`).

use car_proto::errors::RpcError;
use car_proto::methods::replan::{self as m, ReplanConfig};

use crate::handler::{Call, Routes};

pub fn register(routes: &mut Routes) {
    routes.add::<m::SetConfig, _, _>(set_config);
}

async fn set_config(call: Call, config: ReplanConfig) -> Result<(), RpcError> {
    m::check(&config).map_err(RpcError::invalid_params)?;
    tracing::debug!(
        session = call.session.id,
        max_replans = config.max_replans,
        "replan configured"
    );
    call.session.runtime(|rt| rt.replan = config);
    Ok(())
}
