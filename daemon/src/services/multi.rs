//! `multi.*`: the coordination patterns of `car-multi`, each agent run by the caller's
//! agent runner or the daemon's own ([`crate::handler::agent_runner`]).

use car_proto::errors::RpcError;
use car_proto::methods::multi as m;

use crate::handler::agent_runner::SessionRunner;
use crate::handler::{Call, Routes};

fn runner(call: &Call, choice: Option<m::RunnerChoice>) -> SessionRunner {
    SessionRunner::new(call, choice)
}

fn nonempty<T>(field: &str, list: &[T]) -> Result<(), RpcError> {
    if list.is_empty() {
        return Err(RpcError::invalid_params(format!(
            "{field}: must name at least one agent"
        )));
    }
    Ok(())
}

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Swarm, _, _>(|call, p: m::SwarmParams| async move {
            nonempty("agents", &p.agents)?;
            Ok(car_multi::swarm(&runner(&call, p.runner), p).await)
        })
        .add::<m::Pipeline, _, _>(|call, p: m::PipelineParams| async move {
            nonempty("stages", &p.stages)?;
            Ok(car_multi::pipeline(&runner(&call, p.runner), p).await)
        })
        .add::<m::Supervisor, _, _>(|call, p: m::SupervisorParams| async move {
            nonempty("workers", &p.workers)?;
            if p.max_rounds == Some(0) {
                return Err(RpcError::invalid_params("max_rounds: must be at least 1"));
            }
            car_multi::supervisor(&runner(&call, p.runner), p)
                .await
                .map_err(|e| RpcError::internal(format!("supervisor error: {e}")))
        })
        .add::<m::MapReduce, _, _>(|call, p: m::MapReduceParams| async move {
            Ok(car_multi::map_reduce(&runner(&call, p.runner), p).await)
        })
        .add::<m::Vote, _, _>(|call, p: m::VoteParams| async move {
            nonempty("agents", &p.agents)?;
            Ok(car_multi::vote(&runner(&call, p.runner), p).await)
        })
        .add::<m::Tournament, _, _>(|call, p: m::TournamentParams| async move {
            nonempty("competitors", &p.competitors)?;
            Ok(car_multi::tournament(&runner(&call, p.runner), p).await)
        })
        .add::<m::Subtask, _, _>(|call, p: m::SubtaskParams| async move {
            car_multi::subtask(&runner(&call, p.runner), p)
                .await
                .map_err(|e| RpcError::internal(format!("subtask error: {e}")))
        });
}
