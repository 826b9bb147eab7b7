//! launchd property lists (see the parent module for what is expressible).

use std::collections::BTreeMap;

use super::{check_words, xml_escape, RenderSpec};
use crate::cadence::{Cadence, CronExpr};

/// Most `StartCalendarInterval` dicts we write for one cron expression.
const MAX_DICTS: usize = 256;

/// launchd's key for each cron field.
const KEYS: [&str; 5] = ["Minute", "Hour", "Day", "Month", "Weekday"];

pub(super) fn render(
    spec: &RenderSpec<'_>,
    label: &str,
    cadence: &Cadence,
) -> Result<String, String> {
    check_words(spec)?;
    let schedule = match cadence {
        Cadence::Interval(d) => format!(
            "    <key>StartInterval</key>\n    <integer>{}</integer>\n",
            d.as_secs()
        ),
        Cadence::Cron(c) => calendar(c)?,
    };
    let mut out = String::from(concat!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
        "<!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" ",
        "\"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n",
        "<plist version=\"1.0\">\n",
        "<dict>\n",
    ));
    out.push_str(&format!(
        "    <key>Label</key>\n    <string>{}</string>\n",
        xml_escape(label)
    ));
    out.push_str("    <key>ProgramArguments</key>\n    <array>\n");
    for word in std::iter::once(spec.program).chain(spec.args.iter().map(String::as_str)) {
        out.push_str(&format!("        <string>{}</string>\n", xml_escape(word)));
    }
    out.push_str("    </array>\n");
    if let Some(dir) = spec.working_dir {
        out.push_str(&format!(
            "    <key>WorkingDirectory</key>\n    <string>{}</string>\n",
            xml_escape(dir)
        ));
    }
    let mut env = BTreeMap::new();
    env.insert("CAR_HOME".to_owned(), spec.car_home.display().to_string());
    env.extend(
        spec.env
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    out.push_str("    <key>EnvironmentVariables</key>\n    <dict>\n");
    for (k, v) in &env {
        out.push_str(&format!(
            "        <key>{}</key>\n        <string>{}</string>\n",
            xml_escape(k),
            xml_escape(v)
        ));
    }
    out.push_str("    </dict>\n");
    out.push_str(&schedule);
    out.push_str("    <key>RunAtLoad</key>\n    <false/>\n</dict>\n</plist>\n");
    Ok(out)
}

/// `StartCalendarInterval`: one dict per combination of restricted fields' values.
fn calendar(c: &CronExpr) -> Result<String, String> {
    let f = c.fields();
    let restricted = |i: usize| (!f[i].star).then_some(i);
    let common: Vec<usize> = [0, 1, 3].into_iter().filter_map(restricted).collect();
    // Cron ORs day-of-month and day-of-week when both are restricted: the union of dicts.
    let day_sets: Vec<Vec<usize>> = match (restricted(2), restricted(4)) {
        (Some(d), Some(w)) => vec![vec![d], vec![w]],
        (d, w) => vec![d.into_iter().chain(w).collect()],
    };
    let mut dicts: Vec<Vec<(usize, u32)>> = Vec::new();
    for days in &day_sets {
        let mut set: Vec<Vec<(usize, u32)>> = vec![Vec::new()];
        for &i in common.iter().chain(days) {
            let mut next = Vec::new();
            for partial in &set {
                for &v in &f[i].values {
                    let mut d = partial.clone();
                    d.push((i, v));
                    next.push(d);
                }
            }
            if next.len() > MAX_DICTS {
                return Err(format!(
                    "cron `{}` needs more than {MAX_DICTS} StartCalendarInterval entries",
                    c.as_str()
                ));
            }
            set = next;
        }
        dicts.extend(set);
    }
    if dicts.len() > MAX_DICTS {
        return Err(format!(
            "cron `{}` needs more than {MAX_DICTS} StartCalendarInterval entries",
            c.as_str()
        ));
    }
    let dict = |entries: &[(usize, u32)], indent: &str| {
        let mut s = format!("{indent}<dict>\n");
        let mut entries = entries.to_vec();
        entries.sort_unstable();
        for (i, v) in entries {
            s.push_str(&format!(
                "{indent}    <key>{}</key>\n{indent}    <integer>{v}</integer>\n",
                KEYS[i]
            ));
        }
        s.push_str(&format!("{indent}</dict>\n"));
        s
    };
    let mut out = String::from("    <key>StartCalendarInterval</key>\n");
    if let [only] = dicts.as_slice() {
        out.push_str(&dict(only, "    "));
    } else {
        out.push_str("    <array>\n");
        for d in &dicts {
            out.push_str(&dict(d, "        "));
        }
        out.push_str("    </array>\n");
    }
    Ok(out)
}
