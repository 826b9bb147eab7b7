//! Windows Task Scheduler XML (see the parent module for what is expressible).

use super::{check_words, xml_escape, RenderSpec};
use crate::cadence::{Cadence, CronExpr};

const DAY_NAMES: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

pub(super) fn render(
    spec: &RenderSpec<'_>,
    label: &str,
    cadence: &Cadence,
) -> Result<String, String> {
    check_words(spec)?;
    let trigger = match cadence {
        Cadence::Interval(d) => {
            let secs = d.as_secs();
            if secs % 60 != 0 || !(60..=31 * 86_400).contains(&secs) {
                return Err(format!(
                    "Task Scheduler repeats in whole minutes from 1 minute to 31 days, not {secs} s"
                ));
            }
            repeating("2000-01-01T00:00:00", secs / 60)
        }
        Cadence::Cron(c) => cron_trigger(c)?,
    };
    let args: Vec<String> = spec.args.iter().map(|a| win_quote(a)).collect();
    let mut exec = format!(
        "      <Command>{}</Command>\n",
        xml_escape(&win_quote(spec.program))
    );
    if !args.is_empty() {
        exec.push_str(&format!(
            "      <Arguments>{}</Arguments>\n",
            xml_escape(&args.join(" "))
        ));
    }
    if let Some(dir) = spec.working_dir {
        exec.push_str(&format!(
            "      <WorkingDirectory>{}</WorkingDirectory>\n",
            xml_escape(dir)
        ));
    }
    Ok(format!(
        concat!(
            "<?xml version=\"1.0\" encoding=\"UTF-16\"?>\n",
            "<Task version=\"1.2\" ",
            "xmlns=\"http://schemas.microsoft.com/windows/2004/02/mit/task\">\n",
            "  <RegistrationInfo>\n",
            "    <URI>\\{label}</URI>\n",
            "  </RegistrationInfo>\n",
            "  <Triggers>\n",
            "{trigger}",
            "  </Triggers>\n",
            "  <Settings>\n",
            "    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>\n",
            "    <StartWhenAvailable>true</StartWhenAvailable>\n",
            "    <Enabled>true</Enabled>\n",
            "  </Settings>\n",
            "  <Actions Context=\"Author\">\n",
            "    <Exec>\n",
            "{exec}",
            "    </Exec>\n",
            "  </Actions>\n",
            "</Task>\n"
        ),
        label = xml_escape(label),
        trigger = trigger,
        exec = exec,
    ))
}

/// A time trigger from `start`, repeating every `minutes` indefinitely.
fn repeating(start: &str, minutes: u64) -> String {
    format!(
        concat!(
            "    <TimeTrigger>\n",
            "      <StartBoundary>{start}</StartBoundary>\n",
            "      <Repetition>\n",
            "        <Interval>PT{minutes}M</Interval>\n",
            "      </Repetition>\n",
            "      <Enabled>true</Enabled>\n",
            "    </TimeTrigger>\n"
        ),
        start = start,
        minutes = minutes
    )
}

fn cron_trigger(c: &CronExpr) -> Result<String, String> {
    let f = c.fields();
    let single = |i: usize| (f[i].values.len() == 1).then(|| f[i].values[0]);
    let days_any = f[2].star && f[3].star;
    if days_any && f[1].star && f[4].star {
        if f[0].star {
            return Ok(repeating("2000-01-01T00:00:00", 1));
        }
        if let Some(step) = f[0].star_step.filter(|s| 60 % s == 0) {
            return Ok(repeating("2000-01-01T00:00:00", step.into()));
        }
        if let Some(m) = single(0) {
            return Ok(repeating(&format!("2000-01-01T00:{m:02}:00"), 60));
        }
    }
    if let (Some(m), Some(h), true) = (single(0), single(1), days_any) {
        let start = format!("2000-01-01T{h:02}:{m:02}:00");
        let schedule = if f[4].star {
            "      <ScheduleByDay>\n        <DaysInterval>1</DaysInterval>\n      </ScheduleByDay>\n"
                .to_owned()
        } else {
            let days: String = f[4]
                .values
                .iter()
                .map(|&d| format!("          <{} />\n", DAY_NAMES[d as usize]))
                .collect();
            format!(
                concat!(
                    "      <ScheduleByWeek>\n",
                    "        <DaysOfWeek>\n",
                    "{days}",
                    "        </DaysOfWeek>\n",
                    "        <WeeksInterval>1</WeeksInterval>\n",
                    "      </ScheduleByWeek>\n"
                ),
                days = days
            )
        };
        return Ok(format!(
            concat!(
                "    <CalendarTrigger>\n",
                "      <StartBoundary>{start}</StartBoundary>\n",
                "{schedule}",
                "      <Enabled>true</Enabled>\n",
                "    </CalendarTrigger>\n"
            ),
            start = start,
            schedule = schedule
        ));
    }
    Err(format!(
        "cron `{}` can't be expressed in Task Scheduler XML (supported: */N or a fixed minute \
         with every hour, or a fixed time daily or on listed weekdays)",
        c.as_str()
    ))
}

/// Windows command-line quoting (the `CommandLineToArgvW` rules).
fn win_quote(s: &str) -> String {
    if !s.is_empty() && !s.contains([' ', '\t', '"']) {
        return s.to_owned();
    }
    let mut out = String::from("\"");
    let mut backslashes = 0;
    for c in s.chars() {
        match c {
            '\\' => backslashes += 1,
            '"' => {
                out.push_str(&"\\".repeat(backslashes * 2 + 1));
                out.push('"');
                backslashes = 0;
            }
            c => {
                out.push_str(&"\\".repeat(backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.push_str(&"\\".repeat(backslashes * 2));
    out.push('"');
    out
}
