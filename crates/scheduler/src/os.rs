//! The OS backend (`scheduler.os_install` / `os_uninstall` / `os_list` / `os_reconcile`, and
//! durable `tasks.schedule`): systemd user timer units in a directory the daemon chooses.
//!
//! `install` writes `<unit_dir>/car-task-<id>.service` and `.timer` (0644, atomic) from
//! [`mod@crate::render`]'s systemd output, after persisting the task to the task store (an
//! install whose task cannot be saved writes nothing). Installing again replaces both.
//! `reconcile` only reaps units whose service exports this scheduler's `CAR_HOME`, so a
//! daemon never removes another state root's schedules.
//! A unit file we did not write (no `# managed-by: car-runtime` first line) is never
//! replaced, removed or listed: an install over one is refused.
//!
//! With `activate`, install first checks that a systemd user manager answers
//! (`systemctl --user show-environment`, bounded by 10 s): on a machine without one (no user
//! bus: a container, a system service without lingering) a durable schedule would be written
//! and never fire, so the install is refused with `invalid durable` saying what is missing
//! and that `durable: false` runs the task on the daemon's own timer. Nothing is written
//! then. (CAR uses cron on Linux; a cron backend is not implemented here.) Install then runs
//! `systemctl --user daemon-reload` and
//! `systemctl --user enable --now car-task-<id>.timer`, and uninstall runs
//! `systemctl --user disable --now …timer` before deleting and `daemon-reload` after.
//! systemctl's failures (including its absence) are reported in `detail`/logs, never as
//! errors: the files are the source of truth and a later reconcile or login picks them up.
//! Tests use `activate: false` and a temp dir.
//!
//! `reconcile` uninstalls every managed unit whose task file is gone from the task
//! directory or whose `trigger` is not interval/cron. A task directory that exists but
//! cannot be listed is an error and nothing is removed; a missing one counts as empty. A
//! task file that cannot be read or decoded keeps its unit and is reported in `errors`.

use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use crate::command::{Backend, CommandTask};
use crate::render::{label_of, render_spec, systemd, RenderSpec, LABEL_PREFIX};
use crate::task::TaskExt as _;
use crate::task::{Task, Trigger};
use crate::util::{check_id, ensure_dir, is_safe_id, write_atomic};
use crate::{SchedulerError, TaskStore};

pub use car_proto::methods::scheduler::{InstallResult, ReconcileReport, UninstallResult};

#[derive(Debug, Clone)]
pub struct OsScheduler {
    unit_dir: PathBuf,
    car_home: PathBuf,
    activate: bool,
    store: TaskStore,
    /// The `systemctl` run (tests name a stand-in).
    systemctl: PathBuf,
}

impl OsScheduler {
    /// Units go in `unit_dir` (e.g. `~/.config/systemd/user`, or a temp dir in tests), tasks
    /// in `store`; units export `CAR_HOME=car_home`; `activate` runs systemctl.
    pub fn new(
        store: TaskStore,
        unit_dir: impl Into<PathBuf>,
        car_home: impl Into<PathBuf>,
        activate: bool,
    ) -> Self {
        Self {
            unit_dir: unit_dir.into(),
            car_home: car_home.into(),
            activate,
            store,
            systemctl: PathBuf::from("systemctl"),
        }
    }

    /// Runs `program` instead of `systemctl` (a test's stand-in).
    pub fn with_systemctl(mut self, program: impl Into<PathBuf>) -> Self {
        self.systemctl = program.into();
        self
    }

    /// With `activate`, that a systemd user manager answers (see the module docs).
    async fn check_user_manager(&self) -> Result<(), SchedulerError> {
        if !self.activate {
            return Ok(());
        }
        let probe = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tokio::process::Command::new(&self.systemctl)
                .args(["--user", "show-environment"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .output(),
        )
        .await;
        let why = match probe {
            Ok(Ok(out)) if out.status.success() => return Ok(()),
            Ok(Ok(out)) => format!(
                "`systemctl --user show-environment` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Ok(Err(e)) => format!("`systemctl` could not run: {e}"),
            Err(_) => "`systemctl --user` did not answer within 10 s".into(),
        };
        Err(SchedulerError::invalid(
            "durable",
            format!(
                "no systemd user manager answers on this machine ({why}), so a durable schedule would never fire; pass durable: false to run it on the daemon's own timer, or run the daemon in a user session with a systemd user manager (loginctl enable-linger)"
            ),
        ))
    }

    /// The unit directory.
    pub fn unit_dir(&self) -> &Path {
        &self.unit_dir
    }

    /// Installs a prompt task, run as `program args` (e.g. the `car` binary and the
    /// arguments that make it run this task). The stored history is kept.
    pub async fn install(
        &self,
        task: &Task,
        program: &str,
        args: &[String],
    ) -> Result<InstallResult, SchedulerError> {
        task.validate()?;
        self.check_user_manager().await?;
        let spec = RenderSpec {
            task_id: &task.id,
            trigger: task.trigger,
            schedule: &task.schedule,
            program,
            args,
            car_home: &self.car_home,
            working_dir: None,
            env: None,
        };
        let units = self.prepare(&spec)?;
        {
            let _guard = self.store.lock(&task.id).await;
            let mut task = task.clone();
            if let Some(stored) = self.store.load_prompt(&task.id)? {
                task.executions = stored.executions;
                task.run_count = stored.run_count;
                task.last_run_at = stored.last_run_at;
                task.created_at = task.created_at.or(stored.created_at);
            }
            task.created_at.get_or_insert_with(crate::util::now);
            self.store.save_prompt(&task)?;
        }
        self.write_and_activate(&task.id, units).await
    }

    /// Installs a durable command task (`tasks.schedule` with `durable: true`).
    pub async fn install_command(
        &self,
        task: &CommandTask,
    ) -> Result<InstallResult, SchedulerError> {
        let spec = RenderSpec {
            task_id: &task.id,
            trigger: task.trigger,
            schedule: &task.schedule,
            program: &task.program,
            args: &task.args,
            car_home: &self.car_home,
            working_dir: task.working_dir.as_deref(),
            env: task.env.as_ref(),
        };
        let units = self.prepare(&spec)?;
        self.check_user_manager().await?;
        {
            let _guard = self.store.lock(&task.id).await;
            self.store.save_command(task)?;
        }
        self.write_and_activate(&task.id, units).await
    }

    /// Checks the task can be installed and renders its units.
    fn prepare(&self, spec: &RenderSpec<'_>) -> Result<(String, String), SchedulerError> {
        check_id("id", spec.task_id)?;
        if !matches!(spec.trigger, Trigger::Interval | Trigger::Cron) {
            return Err(SchedulerError::invalid(
                "trigger",
                format!(
                    "a `{}` task can't be installed as an OS timer (only interval and cron)",
                    spec.trigger
                ),
            ));
        }
        if !Path::new(spec.program).is_absolute() {
            return Err(SchedulerError::invalid(
                "program",
                format!("`{}` must be an absolute path", spec.program),
            ));
        }
        let rendered = render_spec(spec);
        if let Some(e) = rendered.systemd_error {
            return Err(SchedulerError::invalid("schedule", e));
        }
        let label = label_of(spec.task_id);
        for path in self.unit_paths(spec.task_id) {
            if path.exists() && managed_label(&path).as_deref() != Some(label.as_str()) {
                return Err(SchedulerError::invalid(
                    "id",
                    format!(
                        "{} exists and is not managed by car-runtime",
                        path.display()
                    ),
                ));
            }
        }
        Ok((
            rendered.systemd_service.expect("service rendered"),
            rendered.systemd_timer.expect("timer rendered"),
        ))
    }

    async fn write_and_activate(
        &self,
        id: &str,
        (service, timer): (String, String),
    ) -> Result<InstallResult, SchedulerError> {
        ensure_dir(&self.unit_dir, 0o755)?;
        let [service_path, timer_path] = self.unit_paths(id);
        write_atomic(&service_path, service.as_bytes(), 0o644)?;
        write_atomic(&timer_path, timer.as_bytes(), 0o644)?;
        let label = label_of(id);
        tracing::info!(label, unit_dir = %self.unit_dir.display(), "installed systemd units");
        let mut detail = format!(
            "wrote {} and {}",
            service_path.display(),
            timer_path.display()
        );
        if self.activate {
            let unit = format!("{}.timer", systemd::unit_name(id));
            for args in [&["daemon-reload"][..], &["enable", "--now", &unit]] {
                detail.push_str("; ");
                detail.push_str(&systemctl(&self.systemctl, args).await);
            }
        } else {
            detail.push_str("; not activated");
        }
        Ok(InstallResult {
            label,
            backend: Backend::Systemd,
            detail,
        })
    }

    /// Removes a task's managed units (by label or bare id).
    pub async fn uninstall(&self, label_or_id: &str) -> Result<UninstallResult, SchedulerError> {
        let id = label_or_id
            .strip_prefix(LABEL_PREFIX)
            .unwrap_or(label_or_id);
        check_id("id", id)?;
        let label = label_of(id);
        let ours: Vec<PathBuf> = self
            .unit_paths(id)
            .into_iter()
            .filter(|p| managed_label(p).as_deref() == Some(label.as_str()))
            .collect();
        if ours.is_empty() {
            return Ok(UninstallResult {
                label,
                removed: false,
            });
        }
        if self.activate {
            let unit = format!("{}.timer", systemd::unit_name(id));
            let result = systemctl(&self.systemctl, &["disable", "--now", &unit]).await;
            tracing::info!(%result, "systemctl");
        }
        let mut removed = false;
        for path in &ours {
            match fs::remove_file(path) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(SchedulerError::io("removing", path, e)),
            }
        }
        if self.activate {
            let result = systemctl(&self.systemctl, &["daemon-reload"]).await;
            tracing::info!(%result, "systemctl");
        }
        tracing::info!(label, "uninstalled systemd units");
        Ok(UninstallResult { label, removed })
    }

    /// Labels of the managed units in the unit directory, sorted (missing directory: none).
    pub fn list(&self) -> Result<Vec<String>, SchedulerError> {
        let entries = match fs::read_dir(&self.unit_dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SchedulerError::io("listing", &self.unit_dir, e)),
        };
        let mut labels = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let unit = path
                .extension()
                .is_some_and(|e| e == "service" || e == "timer");
            if let Some(label) = unit.then(|| managed_label(&path)).flatten() {
                labels.push(label);
            }
        }
        labels.sort();
        labels.dedup();
        Ok(labels)
    }

    /// Uninstalls managed units whose task is gone or not interval/cron (module docs).
    pub async fn reconcile(&self) -> Result<ReconcileReport, SchedulerError> {
        // Fails if the task directory exists but can't be listed: then nothing is removed.
        self.store.files()?;
        let mut report = ReconcileReport::default();
        for label in self.list()? {
            let id = label.strip_prefix(LABEL_PREFIX).unwrap_or(&label);
            if !is_safe_id(id) {
                report.errors.push(format!("{label}: not a task label"));
                continue;
            }
            if !self.installed_by_this_home(id) {
                // Another state root's (or an older daemon's) unit: not ours to judge.
                report.kept += 1;
                continue;
            }
            let path = self.store.dir().join(format!("{id}.json"));
            let keep = match fs::read(&path) {
                Err(e) if e.kind() == ErrorKind::NotFound => false,
                Err(e) => {
                    report
                        .errors
                        .push(format!("{label}: reading {}: {e}", path.display()));
                    true
                }
                Ok(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
                    Err(e) => {
                        report
                            .errors
                            .push(format!("{label}: decoding {}: {e}", path.display()));
                        true
                    }
                    Ok(v) => matches!(
                        v.get("trigger").and_then(|t| t.as_str()),
                        Some("interval" | "cron")
                    ),
                },
            };
            if keep {
                report.kept += 1;
                continue;
            }
            match self.uninstall(&label).await {
                Ok(r) if r.removed => report.removed.push(label),
                Ok(_) => {}
                Err(e) => report.errors.push(format!("{label}: {e}")),
            }
        }
        Ok(report)
    }

    /// Whether task `id`'s service unit exports this scheduler's `CAR_HOME`: reconcile only
    /// reaps units its own state root installed (a path that had to be escaped in the unit
    /// never matches, so such a unit is kept, never removed by mistake).
    fn installed_by_this_home(&self, id: &str) -> bool {
        let needle = format!("CAR_HOME={}", self.car_home.display());
        fs::read_to_string(&self.unit_paths(id)[0]).is_ok_and(|text| text.contains(&needle))
    }

    fn unit_paths(&self, id: &str) -> [PathBuf; 2] {
        let name = systemd::unit_name(id);
        [
            self.unit_dir.join(format!("{name}.service")),
            self.unit_dir.join(format!("{name}.timer")),
        ]
    }
}

/// The label in a unit file's `# managed-by: car-runtime label=…` first line, if any.
fn managed_label(path: &Path) -> Option<String> {
    let mut head = [0u8; 512];
    let n = fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .ok()?;
    let text = String::from_utf8_lossy(&head[..n]);
    let first = text.lines().next()?;
    let label = first
        .strip_prefix("# managed-by: car-runtime label=")?
        .trim();
    (!label.is_empty()).then(|| label.to_owned())
}

/// Runs `systemctl --user args…` and says how it went (never fails).
async fn systemctl(program: &Path, args: &[&str]) -> String {
    let shown = format!("systemctl --user {}", args.join(" "));
    match tokio::process::Command::new(program)
        .arg("--user")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
    {
        Ok(out) if out.status.success() => format!("{shown}: ok"),
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            tracing::warn!(
                command = shown,
                status = %out.status,
                stderr = %err.trim(),
                "systemctl failed"
            );
            format!("{shown}: failed ({}): {}", out.status, err.trim())
        }
        Err(e) => {
            tracing::warn!(command = shown, error = %e, "systemctl unavailable");
            format!("{shown}: could not run: {e}")
        }
    }
}
