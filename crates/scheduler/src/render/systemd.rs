//! systemd user units: `car-task-<id>.service` (oneshot) and `car-task-<id>.timer`.
//!
//! Both start with `# managed-by: car-runtime label=<label>`, the line
//! [`crate::OsScheduler`] recognises its own files by. The service has `Type=oneshot`,
//! `Environment="CAR_HOME=…"` (then one `Environment=` per `env` entry),
//! `WorkingDirectory=` if given, and `ExecStart=` with each word double-quoted when it is
//! not plain, `%` written `%%` (specifiers) and `$` written `$$` (variable expansion).
//!
//! The timer has `OnBootSec=`+`OnUnitActiveSec=` for an interval, or `OnCalendar=` for
//! cron: `[DOW ]*-MM-DD HH:MM:00 UTC`, each field `*`, `0/N` for `*/N`, or the list of its
//! values with runs written `a..b` (weekdays `Mon..Fri`). When day-of-month and
//! day-of-week are both restricted, two `OnCalendar=` lines give cron's OR. Then
//! `AccuracySec=1s`, `Persistent=true` and `[Install] WantedBy=timers.target`.

use super::{check_words, RenderSpec};
use crate::cadence::{Cadence, CronExpr, CronField};

/// The header line of every unit file we write.
pub(crate) fn header(label: &str) -> String {
    format!("# managed-by: car-runtime label={label}")
}

/// `car-task-<id>`.
pub(crate) fn unit_name(task_id: &str) -> String {
    format!("car-task-{task_id}")
}

pub(crate) fn render(
    spec: &RenderSpec<'_>,
    label: &str,
    cadence: &Cadence,
) -> Result<(String, String), String> {
    check_words(spec)?;
    let head = header(label);
    let mut service = format!(
        "{head}\n[Unit]\nDescription=car-runtime task {}\n\n[Service]\nType=oneshot\n",
        spec.task_id
    );
    let car_home = spec.car_home.display().to_string();
    service.push_str(&format!(
        "Environment={}\n",
        quote(&format!("CAR_HOME={car_home}"), false)
    ));
    for (k, v) in spec.env.into_iter().flatten() {
        service.push_str(&format!(
            "Environment={}\n",
            quote(&format!("{k}={v}"), false)
        ));
    }
    if let Some(dir) = spec.working_dir {
        service.push_str(&format!("WorkingDirectory={}\n", dir.replace('%', "%%")));
    }
    let words: Vec<String> = std::iter::once(spec.program)
        .chain(spec.args.iter().map(String::as_str))
        .map(exec_word)
        .collect();
    service.push_str(&format!("ExecStart={}\n", words.join(" ")));

    let when = match cadence {
        Cadence::Interval(d) => {
            let s = d.as_secs();
            format!("OnBootSec={s}s\nOnUnitActiveSec={s}s\n")
        }
        Cadence::Cron(c) => on_calendar(c)
            .into_iter()
            .map(|spec| format!("OnCalendar={spec}\n"))
            .collect(),
    };
    let timer = format!(
        "{head}\n[Unit]\nDescription=car-runtime timer for task {}\n\n[Timer]\n{when}\
         AccuracySec=1s\nPersistent=true\n\n[Install]\nWantedBy=timers.target\n",
        spec.task_id
    );
    Ok((service, timer))
}

/// One `ExecStart=` word: bare when plain, else double-quoted; specifiers and variables
/// escaped either way.
fn exec_word(w: &str) -> String {
    if w == ";" {
        return "\\;".into();
    }
    let plain = !w.is_empty()
        && w.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'/' | b'.' | b'_' | b'+' | b'=' | b':' | b',' | b'@' | b'-'
                )
        });
    if plain {
        w.to_owned()
    } else {
        quote(w, true)
    }
}

/// `"…"` with `\` and `"` backslash-escaped, `%` doubled, and `$` doubled if `exec`.
fn quote(s: &str, exec: bool) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if exec => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `OnCalendar=` values for a cron expression (two when cron ORs its day fields).
pub(crate) fn on_calendar(c: &CronExpr) -> Vec<String> {
    let [minute, hour, dom, month, dow] = c.fields();
    let time = format!("{}:{}:00", numbers(hour, 0), numbers(minute, 0));
    let date = |dom: &str| format!("*-{}-{dom}", numbers(month, 1));
    let days = weekdays(dow);
    match (dom.star, dow.star) {
        (false, false) => vec![
            format!("{} {time} UTC", date(&numbers(dom, 1))),
            format!("{days} {} {time} UTC", date("*")),
        ],
        (true, false) => vec![format!("{days} {} {time} UTC", date("*"))],
        _ => vec![format!("{} {time} UTC", date(&numbers(dom, 1)))],
    }
}

/// A numeric field as systemd writes it; `first` is the field's lowest value.
fn numbers(f: &CronField, first: u32) -> String {
    if f.star {
        return "*".into();
    }
    if let Some(step) = f.star_step {
        return format!("{first:02}/{step}");
    }
    runs(&f.values, |v| format!("{v:02}"))
}

/// Weekday names, Monday first, runs of three or more as `a..b`.
fn weekdays(f: &CronField) -> String {
    const NAMES: [&str; 8] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
    let mut days: Vec<u32> = f
        .values
        .iter()
        .map(|&d| if d == 0 { 7 } else { d })
        .collect();
    days.sort_unstable();
    runs(&days, |d| NAMES[d as usize].to_owned())
}

/// Joins ascending values with `,`, writing runs of three or more as `a..b`.
fn runs(values: &[u32], show: impl Fn(u32) -> String) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        if j - i >= 2 {
            parts.push(format!("{}..{}", show(values[i]), show(values[j])));
        } else {
            parts.extend(values[i..=j].iter().map(|&v| show(v)));
        }
        i = j + 1;
    }
    parts.join(",")
}
