//! `scheduler.os_render`: a task's schedule as launchd, crontab, Task Scheduler and systemd
//! text. Pure: no I/O, nothing installed.
//!
//! Only `interval` and `cron` tasks are expressible. For any other trigger, or a schedule
//! that does not parse, every rendering is `None` and every `*_error` says why. A renderer
//! that cannot express a particular cadence sets only its own `*_error`:
//!
//! * **crontab**: `"<cron> <program> <args…> # <label>"`, words shell-quoted and `%` escaped as
//!   `\%`. Intervals map only when exact: N minutes with N dividing 60 → `*/N * * * *` (one minute
//!   is `* * * * *`), 3600 s → `0 * * * *`, H hours with H dividing 24 → `0 */H * * *` (a day is `0
//!   0 * * *`); otherwise "interval of N s can't map to cron". A `working_dir` or `env` (command
//!   tasks) becomes a `cd … && env K=V` prefix; `CAR_HOME` is not added (the line is CAR's shape;
//!   cron's own environment applies).
//! * **launchd**: `StartInterval` for intervals; for cron `StartCalendarInterval`, one dict per
//!   combination of the restricted fields' values (beyond CAR, which only expands a `*/N` minute:
//!   `30 2 * * 1-5` becomes five dicts), at most 256, and when both day-of-month and day-of-week
//!   are restricted, the union of both sets of dicts (cron's OR). `EnvironmentVariables` has
//!   `CAR_HOME` (then `env`), `RunAtLoad` is false, every value XML-escaped.
//! * **schtasks**: Task Scheduler XML for intervals of whole minutes (1 min to 31 days), and for
//!   the cron forms `*/N` minutes, hourly at a fixed minute, daily at a fixed time, and weekly on
//!   listed weekdays at a fixed time; other cron → `schtasks_error`. Task Scheduler XML has no
//!   environment, so `CAR_HOME` and `env` are not carried.
//! * **systemd**: see [`systemd`].
//!
//! Cron renderings carry the same fields, so systemd (`UTC` suffix) fires at the UTC times
//! this crate computes, while crontab, launchd and Task Scheduler read them in local time.

mod launchd;
mod schtasks;
pub mod systemd;

use std::collections::BTreeMap;
use std::path::Path;

use crate::cadence::Cadence;
use crate::task::{cadence_of, Trigger};

/// Prefix of every OS label: `ai.parslee.car.task.<task id>`.
pub const LABEL_PREFIX: &str = "ai.parslee.car.task.";

/// The label of task `task_id`.
pub fn label_of(task_id: &str) -> String {
    format!("{LABEL_PREFIX}{task_id}")
}

pub use car_proto::methods::scheduler::Rendered;

/// Everything a rendering needs. `working_dir` and `env` are for command tasks.
#[derive(Debug, Clone, Copy)]
pub struct RenderSpec<'a> {
    /// The task id (the label's suffix).
    pub task_id: &'a str,
    /// Must be interval or cron to render anything.
    pub trigger: Trigger,
    /// Seconds or cron expression.
    pub schedule: &'a str,
    /// The executable.
    pub program: &'a str,
    /// Its arguments.
    pub args: &'a [String],
    /// Exported as `CAR_HOME` (launchd, systemd).
    pub car_home: &'a Path,
    /// Directory to run in.
    pub working_dir: Option<&'a str>,
    /// Extra environment.
    pub env: Option<&'a BTreeMap<String, String>>,
}

/// Renders a task for every OS backend (CAR's `scheduler.os_render`).
pub fn render(
    task_id: &str,
    trigger: Trigger,
    schedule: &str,
    program: &str,
    args: &[String],
    car_home: &Path,
) -> Rendered {
    render_spec(&RenderSpec {
        task_id,
        trigger,
        schedule,
        program,
        args,
        car_home,
        working_dir: None,
        env: None,
    })
}

/// [`render`] with a command task's working directory and environment.
pub fn render_spec(spec: &RenderSpec<'_>) -> Rendered {
    let label = label_of(spec.task_id);
    let cadence = match cadence_of(spec.trigger, spec.schedule) {
        Ok(Some(c)) => c,
        Ok(None) => {
            let why = format!(
                "trigger `{}` can't be expressed as an OS schedule (only interval and cron can)",
                spec.trigger
            );
            return all_errors(label, why);
        }
        Err(e) => return all_errors(label, e.to_string()),
    };
    let (launchd_plist, launchd_error) = split(launchd::render(spec, &label, &cadence));
    let (crontab_line, crontab_error) = split(crontab(spec, &label, &cadence));
    let (schtasks_xml, schtasks_error) = split(schtasks::render(spec, &label, &cadence));
    let (units, systemd_error) = split(systemd::render(spec, &label, &cadence));
    let (systemd_service, systemd_timer) = units.unzip();
    Rendered {
        label,
        launchd_plist,
        launchd_error,
        crontab_line,
        crontab_error,
        schtasks_xml,
        schtasks_error,
        systemd_service,
        systemd_timer,
        systemd_error,
    }
}

fn all_errors(label: String, why: String) -> Rendered {
    Rendered {
        label,
        launchd_error: Some(why.clone()),
        crontab_error: Some(why.clone()),
        schtasks_error: Some(why.clone()),
        systemd_error: Some(why),
        ..Rendered::default()
    }
}

fn split<T>(r: Result<T, String>) -> (Option<T>, Option<String>) {
    match r {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    }
}

/// The program, arguments and environment values, refused if any holds a newline or NUL
/// (no line-based format can carry them).
pub(crate) fn check_words(spec: &RenderSpec<'_>) -> Result<(), String> {
    let mut words = std::iter::once(spec.program)
        .chain(spec.args.iter().map(String::as_str))
        .chain(spec.working_dir)
        .chain(
            spec.env
                .into_iter()
                .flatten()
                .flat_map(|(k, v)| [k.as_str(), v.as_str()]),
        );
    match words.find(|w| w.contains(['\n', '\r', '\0'])) {
        Some(w) => Err(format!("`{}` contains a newline or NUL", w.escape_debug())),
        None => Ok(()),
    }
}

/// A 5-field cron expression for an interval, when one is exact.
pub(crate) fn interval_as_cron(secs: u64) -> Result<String, String> {
    let fail = || Err(format!("interval of {secs} s can't map to cron"));
    if secs == 0 || !secs.is_multiple_of(60) {
        return fail();
    }
    let minutes = secs / 60;
    match minutes {
        1 => Ok("* * * * *".into()),
        m if m < 60 && 60 % m == 0 => Ok(format!("*/{m} * * * *")),
        60 => Ok("0 * * * *".into()),
        m if m % 60 == 0 && 24 % (m / 60) == 0 && m / 60 < 24 => {
            Ok(format!("0 */{} * * *", m / 60))
        }
        1440 => Ok("0 0 * * *".into()),
        _ => fail(),
    }
}

fn crontab(spec: &RenderSpec<'_>, label: &str, cadence: &Cadence) -> Result<String, String> {
    check_words(spec)?;
    let when = match cadence {
        Cadence::Interval(d) => interval_as_cron(d.as_secs())?,
        Cadence::Cron(c) => c.expanded().to_owned(),
    };
    let mut command = String::new();
    if let Some(dir) = spec.working_dir {
        command.push_str(&format!("cd {} && ", sh_quote(dir)));
    }
    if let Some(env) = spec.env.filter(|e| !e.is_empty()) {
        command.push_str("env");
        for (k, v) in env {
            command.push(' ');
            command.push_str(&sh_quote(&format!("{k}={v}")));
        }
        command.push(' ');
    }
    let words: Vec<String> = std::iter::once(spec.program)
        .chain(spec.args.iter().map(String::as_str))
        .map(sh_quote)
        .collect();
    command.push_str(&words.join(" "));
    // cron turns an unescaped `%` into a newline, even inside quotes.
    Ok(format!("{when} {} # {label}", command.replace('%', "\\%")))
}

/// POSIX shell quoting: plain words stay bare, others are single-quoted.
pub(crate) fn sh_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'@' | b'%' | b'_' | b'+' | b'=' | b':' | b',' | b'.' | b'/' | b'-'
                )
        });
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// XML text/attribute escaping.
pub(crate) fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}
