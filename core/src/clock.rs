//! The one clock and timestamp format every crate shares.
//!
//! Owns: reading the wall clock, the wire's timestamp form (RFC 3339 in UTC with
//! milliseconds and a `Z`: `2026-12-01T17:41:08.022Z`), parsing timestamps callers send, and
//! `strftime` for chat templates. One time crate does the calendar work: [`chrono`]
//! (re-exported, so a crate that needs more, like the scheduler's cron cadences, uses the
//! same version). Durations typed by people (`30s`, `5m`) are a different job and stay with
//! `humantime` where a command line or a message needs them.
//!
//! Must not touch: anything but the clock (no sleeping, no timers, no I/O).

pub use chrono;
use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, NaiveDateTime, SecondsFormat, Utc};

/// Now, truncated to whole milliseconds (the precision every timestamp on the wire and on
/// disk has, so a value read back equals the value written).
pub fn now() -> DateTime<Utc> {
    let t = DateTime::<Utc>::from(std::time::SystemTime::now());
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    now().timestamp_millis()
}

/// [`now_ms`] for the stores that keep unsigned milliseconds (0 before 1970).
pub fn now_ms_u64() -> u64 {
    u64::try_from(now_ms()).unwrap_or(0)
}

/// `t` in the wire's form: `2026-12-01T17:41:08.022Z`.
pub fn rfc3339(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Now in the wire's form.
pub fn now_rfc3339() -> String {
    rfc3339(&now())
}

/// Unix milliseconds in the wire's form (out-of-range values clamp to the epoch).
pub fn rfc3339_from_ms(ms: i64) -> String {
    rfc3339(&DateTime::from_timestamp_millis(ms).unwrap_or_default())
}

/// Parses a timestamp a caller sent: RFC 3339 with any offset, or the same without an offset
/// (taken as UTC, with `T` or a space between date and time).
pub fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(text, f).ok())
        .map(|t| t.and_utc())
        .ok_or_else(|| format!("{text:?} is not an RFC 3339 time"))
}

/// `t` through a C `strftime` format (chrono's directives, which are glibc's). A directive
/// chrono does not know is kept as written, as glibc does, instead of failing the render.
pub fn strftime(format: &str, t: &DateTime<Utc>) -> String {
    let mut out = String::with_capacity(format.len() + 16);
    let mut rest = format;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let spec = &rest[at..];
        // A directive is `%`, optional flags or width (`-`, `_`, `0`, `:`, `.`, digits),
        // then one letter or `%`.
        let len = spec[1..]
            .char_indices()
            .find(|(_, c)| c.is_ascii_alphabetic() || *c == '%')
            .map(|(i, c)| 1 + i + c.len_utf8())
            .filter(|&n| n <= 6)
            .unwrap_or(1);
        let directive = &spec[..len];
        if StrftimeItems::new(directive).any(|item| item == Item::Error) {
            out.push_str(directive);
        } else {
            out.push_str(&t.format(directive).to_string());
        }
        rest = &spec[len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_has_milliseconds_and_z_and_round_trips() {
        assert_eq!(rfc3339_from_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_from_ms(1_764_610_868_022),
            "2025-12-01T17:41:08.022Z"
        );
        let now = now();
        assert_eq!(parse_rfc3339(&rfc3339(&now)).unwrap(), now);
    }

    #[test]
    fn parse_accepts_offsets_and_offsetless_utc_and_names_bad_text() {
        let utc = parse_rfc3339("2026-01-02T03:04:05Z").unwrap();
        assert_eq!(parse_rfc3339("2026-01-02T04:04:05+01:00").unwrap(), utc);
        assert_eq!(parse_rfc3339("2026-01-02T03:04:05").unwrap(), utc);
        assert_eq!(parse_rfc3339("2026-01-02 03:04:05").unwrap(), utc);
        let err = parse_rfc3339("yesterday").unwrap_err();
        assert!(err.contains("\"yesterday\""), "{err}");
    }

    #[test]
    fn strftime_formats_like_glibc_and_keeps_unknown_directives() {
        // 2024-07-26 13:25:09 UTC, a Friday, day 208.
        let t = DateTime::from_timestamp(1_722_000_309, 0).unwrap();
        assert_eq!(
            strftime("%d %b %Y|%B %e|%a %A|%H:%M:%S %I%p|%j|%y-%m|%%|%Q", &t),
            "26 Jul 2024|July 26|Fri Friday|13:25:09 01PM|208|24-07|%|%Q"
        );
        let leap = DateTime::from_timestamp(951_782_400, 0).unwrap();
        assert_eq!(strftime("%Y-%m-%d", &leap), "2000-02-29");
        let epoch = DateTime::from_timestamp(0, 0).unwrap();
        assert_eq!(strftime("%Y-%m-%d", &epoch), "1970-01-01");
        assert_eq!(strftime("trailing %", &epoch), "trailing %");
        assert_eq!(strftime("%-d/%-m|%e", &epoch), "1/1| 1");
    }
}
