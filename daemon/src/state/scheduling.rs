//! The scheduler's stores a daemon opens once: the task files, OS schedules, command
//! tasks and the daemon timers that fire non-durable tasks (`tasks.*` and `scheduler.*`
//! read them through [`crate::state::ServerState`]).

use std::path::PathBuf;

use car_scheduler::{CommandTasks, DaemonTimers, OsScheduler, TaskStore};

/// The daemon's scheduling state.
#[derive(Debug)]
pub struct Scheduling {
    pub store: TaskStore,
    pub os: OsScheduler,
    pub commands: CommandTasks,
    pub timers: DaemonTimers,
    pub car_home: PathBuf,
}

impl Scheduling {
    /// Opens the task store and, on the state root's primary daemon, starts the daemon
    /// timers of the stored non-durable tasks (a second daemon on the same `CAR_HOME` arms
    /// only the tasks scheduled through it, so stored tasks fire once). Must run inside the
    /// tokio runtime.
    pub fn open(
        car_home: &std::path::Path,
        unit_dir: Option<PathBuf>,
        activate: bool,
        primary: bool,
    ) -> Result<Self, String> {
        let store = TaskStore::new(car_home.join("tasks"));
        let unit_dir = unit_dir.unwrap_or_else(default_unit_dir);
        let os = OsScheduler::new(store.clone(), unit_dir, car_home, activate);
        let (logs, grace) = (car_home.join("logs"), car_scheduler::DEFAULT_KILL_GRACE);
        let timers = if primary {
            DaemonTimers::start(store.clone(), logs, grace).map_err(|e| e.to_string())?
        } else {
            DaemonTimers::idle(store.clone(), logs, grace)
        };
        let commands = CommandTasks::new(store.clone(), timers.clone(), os.clone());
        Ok(Scheduling {
            store,
            os,
            commands,
            timers,
            car_home: car_home.to_path_buf(),
        })
    }
}

fn default_unit_dir() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from(".config"))
        .join("systemd")
        .join("user")
}
