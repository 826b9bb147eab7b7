//! Cadences: a fixed interval, or a 5-field Unix cron expression evaluated in UTC.
//!
//! # Cron
//!
//! `minute hour day-of-month month day-of-week`, each field a comma list of `*`, `N`,
//! `A-B`, `*/S` or `A-B/S`; months also `JAN`–`DEC`, weekdays `SUN`–`SAT` (0 and 7 are
//! both Sunday), case-insensitive. The macros `@hourly @daily @midnight @weekly @monthly
//! @yearly @annually` expand to their usual expressions. As in Vixie cron, when both
//! day-of-month and day-of-week are restricted (neither is literally `*`) a day matches if
//! *either* does. Nothing else is accepted: no seconds or year field, no `L`, `W`, `#`, `?`
//! or `@reboot`, and no bare `N/S`. An expression that can never fire (`0 0 30 2 *`) is
//! refused.
//!
//! Our own field parser validates first, so errors are precise ("minute field `61` out of
//! range 0-59") and the renderers ([`mod@crate::render`]) get each field's values; the
//! [`croner`] crate, pinned to five fields (no seconds, no year), computes occurrences.
//!
//! # Time zone
//!
//! Cron is evaluated in UTC, always: a task's `30 2 * * *` is 02:30 UTC whatever the host's
//! zone. The systemd rendering says so (`OnCalendar=… UTC`); crontab, launchd and Task
//! Scheduler interpret their renderings in the host's local time.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};

/// Longest accepted interval: ten years, far from `SystemTime` overflow.
pub const MAX_INTERVAL_SECS: u64 = 10 * 365 * 24 * 3600;

/// How often something recurs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cadence {
    /// Every so long.
    Interval(Duration),
    /// At the times a cron expression matches (UTC).
    Cron(CronExpr),
}

impl Cadence {
    /// The first occurrence strictly after `t`. For an interval that is `t + interval`
    /// (interval anchoring is the caller's business); for cron, the next matching minute.
    pub fn next_after(&self, t: SystemTime) -> SystemTime {
        match self {
            Cadence::Interval(d) => t + *d,
            Cadence::Cron(c) => c.next_after(t),
        }
    }
}

/// A parsed, validated 5-field cron expression. Cheap to clone.
#[derive(Clone)]
pub struct CronExpr(Arc<CronInner>);

struct CronInner {
    source: String,
    expanded: String,
    fields: [CronField; 5],
    cron: croner::Cron,
}

impl fmt::Debug for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CronExpr").field(&self.0.source).finish()
    }
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.0.expanded == other.0.expanded
    }
}
impl Eq for CronExpr {}

/// One field of a cron expression: its text and the values it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CronField {
    /// The field as written (after macro expansion), upper-cased.
    pub(crate) text: String,
    /// Selected values, ascending, deduplicated (weekday 7 folded into 0).
    pub(crate) values: Vec<u32>,
    /// The field is literally `*`.
    pub(crate) star: bool,
    /// The field is `*/S`: its step.
    pub(crate) star_step: Option<u32>,
}

impl CronExpr {
    /// The expression as given.
    pub fn as_str(&self) -> &str {
        &self.0.source
    }

    /// The five-field form (macros expanded).
    pub fn expanded(&self) -> &str {
        &self.0.expanded
    }

    /// The five fields: minute, hour, day-of-month, month, day-of-week.
    pub(crate) fn fields(&self) -> &[CronField; 5] {
        &self.0.fields
    }

    /// The first matching minute strictly after `t`.
    pub fn next_after(&self, t: SystemTime) -> SystemTime {
        let from = DateTime::<Utc>::from(t);
        match self.0.cron.find_next_occurrence(&from, false) {
            Ok(next) => next.into(),
            Err(e) => {
                // Unreachable for an expression that parse_cron accepted (it checked that
                // the expression fires); a day later keeps a caller's loop from spinning.
                tracing::warn!(cron = %self.0.source, error = %e, "no next cron occurrence");
                t + Duration::from_secs(86_400)
            }
        }
    }

    /// The latest matching minute at or before `t`, if any within croner's search range.
    pub fn latest_at_or_before(&self, t: SystemTime) -> Option<SystemTime> {
        let from = DateTime::<Utc>::from(t);
        self.0
            .cron
            .find_previous_occurrence(&from, true)
            .ok()
            .map(Into::into)
    }
}

struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTHS: &[&str] = &[
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

const SPECS: [FieldSpec; 5] = [
    FieldSpec {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    FieldSpec {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    FieldSpec {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
    },
    FieldSpec {
        name: "month",
        min: 1,
        max: 12,
        names: MONTHS,
    },
    FieldSpec {
        name: "day-of-week",
        min: 0,
        max: 7,
        names: WEEKDAYS,
    },
];

/// Parses whole seconds (`"3600"`) into an interval: ≥ 1 and ≤ [`MAX_INTERVAL_SECS`].
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let secs: u64 = t
        .parse()
        .map_err(|_| format!("interval must be a whole number of seconds ≥ 1, got `{s}`"))?;
    if secs == 0 {
        return Err("interval must be at least 1 second, got `0`".into());
    }
    if secs > MAX_INTERVAL_SECS {
        return Err(format!(
            "interval of {secs} s is longer than the maximum {MAX_INTERVAL_SECS} s"
        ));
    }
    Ok(Duration::from_secs(secs))
}

/// Parses a 5-field cron expression or macro (see the module docs). The error says which
/// field is wrong and why.
pub fn parse_cron(s: &str) -> Result<CronExpr, String> {
    let source = s.trim();
    if source.is_empty() {
        return Err("cron expression is empty".into());
    }
    let expanded = if let Some(name) = source.strip_prefix('@') {
        match name.to_ascii_lowercase().as_str() {
            "hourly" => "0 * * * *",
            "daily" | "midnight" => "0 0 * * *",
            "weekly" => "0 0 * * 0",
            "monthly" => "0 0 1 * *",
            "yearly" | "annually" => "0 0 1 1 *",
            _ => {
                return Err(format!(
                    "unknown cron macro `{source}` (expected @hourly, @daily, @weekly, \
                     @monthly or @yearly)"
                ))
            }
        }
        .to_owned()
    } else {
        source.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let parts: Vec<&str> = expanded.split(' ').collect();
    if parts.len() != 5 {
        return Err(format!(
            "cron expression needs 5 fields (minute hour day-of-month month day-of-week), \
             got {}",
            parts.len()
        ));
    }
    let mut fields = Vec::with_capacity(5);
    for (spec, text) in SPECS.iter().zip(&parts) {
        fields.push(parse_field(spec, text)?);
    }
    let fields: [CronField; 5] = fields.try_into().expect("five fields");
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(&expanded)
        .map_err(|e| format!("cron expression `{source}` rejected: {e}"))?;
    let reference = Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap();
    if cron.find_next_occurrence(&reference, false).is_err() {
        return Err(format!("cron expression `{source}` never fires"));
    }
    Ok(CronExpr(Arc::new(CronInner {
        source: source.to_owned(),
        expanded,
        fields,
        cron,
    })))
}

fn parse_field(spec: &FieldSpec, text: &str) -> Result<CronField, String> {
    let upper = text.to_ascii_uppercase();
    let name = spec.name;
    let mut values = Vec::new();
    for part in upper.split(',') {
        if part.is_empty() {
            return Err(format!("{name} field `{text}` has an empty list item"));
        }
        let (base, step) = match part.split_once('/') {
            Some((base, step)) => {
                let step: u32 = step
                    .parse()
                    .map_err(|_| format!("{name} field `{part}`: step `{step}` is not a number"))?;
                if step == 0 || step > spec.max {
                    return Err(format!(
                        "{name} field `{part}`: step {step} out of range 1-{}",
                        spec.max
                    ));
                }
                (base, Some(step))
            }
            None => (part, None),
        };
        let (lo, hi) = if base == "*" {
            (spec.min, if name == "day-of-week" { 6 } else { spec.max })
        } else if let Some((a, b)) = base.split_once('-') {
            let (a, b) = (value(spec, a)?, value(spec, b)?);
            if a > b {
                return Err(format!(
                    "{name} field `{base}`: range start is after its end"
                ));
            }
            (a, b)
        } else {
            if step.is_some() {
                return Err(format!(
                    "{name} field `{part}`: a step needs `*` or a range before `/`"
                ));
            }
            let v = value(spec, base)?;
            (v, v)
        };
        let mut v = lo;
        while v <= hi {
            values.push(if name == "day-of-week" { v % 7 } else { v });
            v += step.unwrap_or(1);
        }
    }
    values.sort_unstable();
    values.dedup();
    let star_step = upper
        .strip_prefix("*/")
        .and_then(|s| s.parse().ok())
        .filter(|_| !upper.contains(','));
    Ok(CronField {
        star: upper == "*",
        star_step,
        text: upper,
        values,
    })
}

fn value(spec: &FieldSpec, s: &str) -> Result<u32, String> {
    if let Some(i) = spec.names.iter().position(|n| *n == s) {
        return Ok(i as u32 + spec.min);
    }
    let v: u32 = s.parse().map_err(|_| {
        if spec.names.is_empty() {
            format!("{} field `{s}` is not a number", spec.name)
        } else {
            format!("{} field `{s}` is not a number or a name", spec.name)
        }
    })?;
    if v < spec.min || v > spec.max {
        return Err(format!(
            "{} field `{v}` out of range {}-{}",
            spec.name, spec.min, spec.max
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SystemTime {
        DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&Utc)
            .into()
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            parse_cron("61 * * * *").unwrap_err(),
            "minute field `61` out of range 0-59"
        );
        assert!(parse_cron("* 24 * * *")
            .unwrap_err()
            .starts_with("hour field `24`"));
        assert!(parse_cron("* * 0 * *")
            .unwrap_err()
            .contains("day-of-month"));
        assert!(parse_cron("* * * FOO *")
            .unwrap_err()
            .contains("not a number or a name"));
        assert!(parse_cron("*/0 * * * *").unwrap_err().contains("step 0"));
        assert!(parse_cron("5-1 * * * *")
            .unwrap_err()
            .contains("range start"));
        assert!(parse_cron("* * * *").unwrap_err().contains("got 4"));
        assert!(parse_cron("0 * * * * *").unwrap_err().contains("got 6"));
        assert!(parse_cron("0 0 L * *").is_err());
        assert!(parse_cron("5/10 * * * *")
            .unwrap_err()
            .contains("needs `*`"));
        assert!(parse_cron("@reboot")
            .unwrap_err()
            .contains("unknown cron macro"));
        assert!(parse_cron("0 0 30 2 *")
            .unwrap_err()
            .contains("never fires"));
        assert_eq!(
            parse_interval("0").unwrap_err(),
            "interval must be at least 1 second, got `0`"
        );
        assert!(parse_interval("1.5").is_err());
        assert!(parse_interval("-3").is_err());
    }

    #[test]
    fn values_and_occurrences() {
        let c = parse_cron("*/15 * * * *").unwrap();
        assert_eq!(c.fields()[0].values, vec![0, 15, 30, 45]);
        assert_eq!(c.fields()[0].star_step, Some(15));
        let c = parse_cron("30 2 * * mon-fri").unwrap();
        assert_eq!(c.fields()[4].values, vec![1, 2, 3, 4, 5]);
        // 2026-12-05 is a Saturday: the next weekday run is Monday 02:30 UTC.
        let next = c.next_after(at("2026-12-05T10:00:00Z"));
        assert_eq!(next, at("2026-12-07T02:30:00Z"));
        assert_eq!(
            c.latest_at_or_before(at("2026-12-07T02:30:00Z")),
            Some(next)
        );
        assert_eq!(parse_cron("0 0 * * 7").unwrap().fields()[4].values, vec![0]);
        assert_eq!(parse_cron("@weekly").unwrap().expanded(), "0 0 * * 0");
        // Day-of-month OR day-of-week when both are restricted (Vixie semantics).
        let c = parse_cron("0 0 1 * 1").unwrap();
        assert_eq!(
            c.next_after(at("2026-12-01T00:00:00Z")),
            at("2026-12-07T00:00:00Z")
        );
        let i = Cadence::Interval(Duration::from_secs(5));
        assert_eq!(
            i.next_after(at("2026-12-01T00:00:00Z")),
            at("2026-12-01T00:00:05Z")
        );
    }
}
