//! `scheduler.*` and `tasks.*` on `car-scheduler` (see `car_proto::methods::scheduler`).
//!
//! A prompt task's run (`scheduler.run` / `run_loop`) is one agent — the task's name,
//! `system_prompt`, `max_turns` and `agent_metadata` — run by the caller's agent runner
//! through `multi.run_agent`, or by the daemon when the caller has none
//! ([`crate::handler::agent_runner`]). OS schedules are systemd user units under
//! `--systemd-user-dir`; `--no-systemctl` writes them without enabling them.

use std::time::Duration;

use car_multi::AgentRunner;
use car_proto::errors::RpcError;
use car_proto::methods::fields::{Name, NoParams};
use car_proto::methods::multi::AgentSpec;
use car_proto::methods::scheduler::{self as m};
use car_scheduler::{PromptRunner, Task, TaskExt};
use serde_json::{Map, Value};

use crate::handler::agent_runner::SessionRunner;
use crate::handler::{Call, Routes};

fn strip_nulls(v: &mut Value) {
    if let Value::Object(map) = v {
        map.retain(|_, v| !v.is_null());
        map.values_mut().for_each(strip_nulls);
    }
}

fn task_of(task: Map<String, Value>) -> Result<Task, RpcError> {
    car_scheduler::decode::<Task>(Value::Object(task)).map_err(|e| RpcError::from(e.within("task")))
}

struct Runner(SessionRunner);

impl PromptRunner for Runner {
    fn run<'a>(
        &'a self,
        prompt: &'a str,
        system_prompt: &'a str,
        max_turns: u32,
        metadata: &'a Map<String, Value>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>
    {
        Box::pin(async move {
            let mut spec = AgentSpec::named("scheduled-task", system_prompt);
            spec.max_turns = max_turns;
            spec.metadata = metadata.clone();
            let out = self.0.run(&spec, prompt).await?;
            match out.error {
                Some(e) => Err(e),
                None => Ok(out.answer),
            }
        })
    }
}

fn runner(call: &Call) -> Runner {
    Runner(SessionRunner::new(call, None))
}

/// The principal a prompt task run is on behalf of: the bound agent, or none (the user).
fn task_owner(call: &Call) -> Option<String> {
    call.session
        .agent_id()
        .map(|agent| format!("agent:{agent}"))
}

pub fn register(routes: &mut Routes) {
    routes
        .add::<m::Create, _, _>(|_call, p: m::CreateParams| async move {
            let new = car_scheduler::NewTask {
                name: p.name.into_string(),
                prompt: p.prompt,
                trigger: p.trigger,
                schedule: p.schedule.unwrap_or_default(),
                system_prompt: p.system_prompt.unwrap_or_default(),
                ..Default::default()
            };
            Task::create(new).map_err(RpcError::from)
        })
        .add::<m::Run, _, _>(|call, p: m::RunParams| async move {
            let task = task_of(p.task)?;
            let owner = task_owner(&call);
            let (_, execution) = car_scheduler::run_task_as(
                &call.state.runs.scheduling.store,
                task,
                &runner(&call),
                owner.as_deref(),
            )
            .await
            .map_err(|e| RpcError::from(e.within("task")))?;
            Ok(execution)
        })
        .add::<m::RunLoop, _, _>(|call, p: m::RunLoopParams| async move {
            let task = task_of(p.task)?;
            let owner = task_owner(&call);
            let runs = car_scheduler::run_task_loop_as(
                &call.state.runs.scheduling.store,
                task,
                p.max_iterations,
                &runner(&call),
                owner.as_deref(),
            )
            .await
            .map_err(RpcError::from)?;
            Ok(runs)
        })
        .add::<m::OsRender, _, _>(|call, p: m::OsScheduleParams| async move {
            let task = task_of(p.task)?;
            let args = p.args.unwrap_or_default();
            Ok(car_scheduler::render(
                &task.id,
                task.trigger,
                &task.schedule,
                &p.program,
                &args,
                &call.state.runs.scheduling.car_home,
            ))
        })
        .add::<m::OsInstall, _, _>(|call, p: m::OsScheduleParams| async move {
            let task = task_of(p.task)?;
            if !std::path::Path::new(&p.program).is_absolute() {
                return Err(RpcError::invalid_params(format!(
                    "program: must be an absolute path, got {:?}",
                    p.program
                )));
            }
            let args = p.args.unwrap_or_default();
            call.state
                .runs
                .scheduling
                .os
                .install(&task, &p.program, &args)
                .await
                .map_err(RpcError::from)
        })
        .add::<m::OsUninstall, _, _>(|call, p: m::OsUninstallParams| async move {
            call.state
                .runs
                .scheduling
                .os
                .uninstall(&p.label)
                .await
                .map_err(RpcError::from)
        })
        .add::<m::OsList, _, _>(|call, _: NoParams| async move {
            call.state.runs.scheduling.os.list().map_err(RpcError::from)
        })
        .add::<m::OsReconcile, _, _>(|call, _: NoParams| async move {
            call.state
                .runs
                .scheduling
                .os
                .reconcile()
                .await
                .map_err(RpcError::from)
        })
        .add::<m::Schedule, _, _>(|call, p: m::ScheduleParams| async move {
            // Absent fields stay absent (the engine's decoder reads `null` as a wrong type).
            let mut raw = serde_json::to_value(&p).map_err(RpcError::internal)?;
            strip_nulls(&mut raw);
            let request = car_scheduler::decode(raw).map_err(RpcError::from)?;
            call.state
                .runs
                .scheduling
                .commands
                .schedule(request)
                .await
                .map_err(RpcError::from)
        })
        .add::<m::List, _, _>(|call, _: NoParams| async move {
            call.state
                .runs
                .scheduling
                .commands
                .list()
                .map_err(RpcError::from)
        })
        .add::<m::Unschedule, _, _>(|call, p: m::UnscheduleParams| async move {
            let id: Name = p.id;
            call.state
                .runs
                .scheduling
                .commands
                .unschedule(&id)
                .await
                .map_err(RpcError::from)
        });
}

/// How long daemon-timer commands get to exit at shutdown.
pub const SHUTDOWN_GRACE: Duration = car_scheduler::DEFAULT_KILL_GRACE;
