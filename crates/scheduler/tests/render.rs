//! `scheduler.os_render` goldens, escaping, and (where systemd-analyze exists) a check that
//! systemd's reading of our `OnCalendar=` agrees with our own cron evaluation.

use std::path::Path;
use std::time::SystemTime;

use car_scheduler::{parse_cron, render, Rendered, Trigger};

const ID: &str = "9946d03a-b";
const LABEL: &str = "ai.parslee.car.task.9946d03a-b";

fn r(trigger: Trigger, schedule: &str) -> Rendered {
    let args = ["scheduler".to_owned(), "run".to_owned(), ID.to_owned()];
    render(
        ID,
        trigger,
        schedule,
        "/usr/bin/car",
        &args,
        Path::new("/home/u/.car"),
    )
}

const PLIST_HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>ai.parslee.car.task.9946d03a-b</string>
    <key>ProgramArguments</key>
    <array>
        <string>/usr/bin/car</string>
        <string>scheduler</string>
        <string>run</string>
        <string>9946d03a-b</string>
    </array>
    <key>EnvironmentVariables</key>
    <dict>
        <key>CAR_HOME</key>
        <string>/home/u/.car</string>
    </dict>
"#;
const PLIST_TAIL: &str = "    <key>RunAtLoad</key>\n    <false/>\n</dict>\n</plist>\n";

const SERVICE: &str = "# managed-by: car-runtime label=ai.parslee.car.task.9946d03a-b
[Unit]
Description=car-runtime task 9946d03a-b

[Service]
Type=oneshot
Environment=\"CAR_HOME=/home/u/.car\"
ExecStart=/usr/bin/car scheduler run 9946d03a-b
";

fn timer(when: &str) -> String {
    format!(
        "# managed-by: car-runtime label=ai.parslee.car.task.9946d03a-b
[Unit]
Description=car-runtime timer for task 9946d03a-b

[Timer]
{when}AccuracySec=1s
Persistent=true

[Install]
WantedBy=timers.target
"
    )
}

#[test]
fn interval_3600() {
    let out = r(Trigger::Interval, "3600");
    assert_eq!(out.label, LABEL);
    assert_eq!(
        out.crontab_line.as_deref(),
        Some("0 * * * * /usr/bin/car scheduler run 9946d03a-b # ai.parslee.car.task.9946d03a-b")
    );
    let plist = format!(
        "{PLIST_HEAD}    <key>StartInterval</key>\n    <integer>3600</integer>\n{PLIST_TAIL}"
    );
    assert_eq!(out.launchd_plist.as_deref(), Some(plist.as_str()));
    assert_eq!(out.systemd_service.as_deref(), Some(SERVICE));
    let t = timer("OnBootSec=3600s\nOnUnitActiveSec=3600s\n");
    assert_eq!(out.systemd_timer.as_deref(), Some(t.as_str()));
    let xml = out.schtasks_xml.unwrap();
    assert!(xml.contains("<Interval>PT60M</Interval>"), "{xml}");
    assert!(xml.contains("<Command>/usr/bin/car</Command>"));
    assert!(xml.contains("<Arguments>scheduler run 9946d03a-b</Arguments>"));
    assert!(xml.contains(r"<URI>\ai.parslee.car.task.9946d03a-b</URI>"));
    let errors = [
        &out.launchd_error,
        &out.crontab_error,
        &out.schtasks_error,
        &out.systemd_error,
    ];
    assert!(errors.iter().all(|e| e.is_none()));
}

#[test]
fn interval_90_has_no_cron() {
    let out = r(Trigger::Interval, "90");
    assert_eq!(out.crontab_line, None);
    assert_eq!(
        out.crontab_error.as_deref(),
        Some("interval of 90 s can't map to cron")
    );
    assert!(out.launchd_plist.unwrap().contains("<integer>90</integer>"));
    assert!(out.systemd_timer.unwrap().contains("OnUnitActiveSec=90s\n"));
    assert!(out.schtasks_error.unwrap().contains("whole minutes"));
    for (secs, cron) in [
        ("60", "* * * * *"),
        ("600", "*/10 * * * *"),
        ("21600", "0 */6 * * *"),
        ("86400", "0 0 * * *"),
    ] {
        let line = r(Trigger::Interval, secs).crontab_line.unwrap();
        assert!(
            line.starts_with(&format!("{cron} /usr/bin/car")),
            "{secs}: {line}"
        );
    }
    for secs in ["420", "25200", "172800"] {
        assert!(r(Trigger::Interval, secs).crontab_error.is_some(), "{secs}");
    }
}

#[test]
fn cron_every_15_minutes() {
    let out = r(Trigger::Cron, "*/15 * * * *");
    assert_eq!(
        out.crontab_line.as_deref(),
        Some("*/15 * * * * /usr/bin/car scheduler run 9946d03a-b # ai.parslee.car.task.9946d03a-b")
    );
    let dicts: String = [0, 15, 30, 45]
        .iter()
        .map(|m| format!("        <dict>\n            <key>Minute</key>\n            <integer>{m}</integer>\n        </dict>\n"))
        .collect();
    let plist = format!(
        "{PLIST_HEAD}    <key>StartCalendarInterval</key>\n    <array>\n{dicts}    </array>\n{PLIST_TAIL}"
    );
    assert_eq!(out.launchd_plist.as_deref(), Some(plist.as_str()));
    let t = timer("OnCalendar=*-*-* *:00/15:00 UTC\n");
    assert_eq!(out.systemd_timer.as_deref(), Some(t.as_str()));
    assert!(out
        .schtasks_xml
        .unwrap()
        .contains("<Interval>PT15M</Interval>"));
}

#[test]
fn cron_weekdays_at_0230() {
    let out = r(Trigger::Cron, "30 2 * * 1-5");
    assert!(out
        .crontab_line
        .unwrap()
        .starts_with("30 2 * * 1-5 /usr/bin/car "));
    let t = timer("OnCalendar=Mon..Fri *-*-* 02:30:00 UTC\n");
    assert_eq!(out.systemd_timer.as_deref(), Some(t.as_str()));
    // One launchd dict per weekday (CAR would refuse; see the render module docs).
    let plist = out.launchd_plist.unwrap();
    assert_eq!(plist.matches("<key>Weekday</key>").count(), 5);
    assert!(plist.contains(
        "        <dict>\n            <key>Minute</key>\n            <integer>30</integer>\n            <key>Hour</key>\n            <integer>2</integer>\n            <key>Weekday</key>\n            <integer>1</integer>\n        </dict>\n"
    ));
    let xml = out.schtasks_xml.unwrap();
    assert!(xml.contains("<StartBoundary>2000-01-01T02:30:00</StartBoundary>"));
    assert!(
        xml.contains("<Monday />") && xml.contains("<Friday />") && !xml.contains("<Sunday />")
    );
}

#[test]
fn cron_that_only_some_backends_express() {
    // Both day fields restricted: cron ORs them; systemd gets two OnCalendar lines.
    let out = r(Trigger::Cron, "0 12 1 * 1,3");
    let t = timer("OnCalendar=*-*-01 12:00:00 UTC\nOnCalendar=Mon,Wed *-*-* 12:00:00 UTC\n");
    assert_eq!(out.systemd_timer.as_deref(), Some(t.as_str()));
    assert_eq!(
        out.launchd_plist
            .unwrap()
            .matches("<dict>\n            <key>Minute")
            .count(),
        3
    );
    assert!(out.schtasks_error.unwrap().contains("can't be expressed"));
    // Too many combinations for launchd.
    let out = r(Trigger::Cron, "*/5 0-23 * * 1-5");
    assert!(out.launchd_error.unwrap().contains("StartCalendarInterval"));
    assert!(out.systemd_timer.is_some() && out.crontab_line.is_some());
}

#[test]
fn once_and_manual_and_bad_schedules_render_nothing() {
    for (trigger, schedule) in [
        (Trigger::Once, "2026-12-24T18:00:00Z"),
        (Trigger::Manual, ""),
        (Trigger::FileWatch, ""),
        (Trigger::Cron, "61 * * * *"),
        (Trigger::Interval, "0"),
    ] {
        let out = r(trigger, schedule);
        assert_eq!(out.label, LABEL);
        let renders = [
            &out.launchd_plist,
            &out.crontab_line,
            &out.schtasks_xml,
            &out.systemd_service,
            &out.systemd_timer,
        ];
        assert!(renders.iter().all(|x| x.is_none()), "{trigger} {schedule}");
        let errors = [
            &out.launchd_error,
            &out.crontab_error,
            &out.schtasks_error,
            &out.systemd_error,
        ];
        assert!(errors.iter().all(|e| e.is_some()), "{trigger} {schedule}");
    }
    let out = r(Trigger::Once, "2026-12-24T18:00:00Z");
    assert!(out.systemd_error.unwrap().contains("once"));
    assert!(r(Trigger::Cron, "61 * * * *")
        .crontab_error
        .unwrap()
        .contains("minute field `61`"));
}

#[test]
fn values_are_escaped() {
    let args = ["it's 100%".to_owned(), "$HOME".to_owned(), "<&>".to_owned()];
    let out = render(
        ID,
        Trigger::Interval,
        "3600",
        "/opt/my tools/run",
        &args,
        Path::new("/h/%u"),
    );
    assert_eq!(
        out.crontab_line.as_deref(),
        Some(
            r"0 * * * * '/opt/my tools/run' 'it'\''s 100\%' '$HOME' '<&>' # ai.parslee.car.task.9946d03a-b"
        )
    );
    let service = out.systemd_service.unwrap();
    assert!(
        service.contains("Environment=\"CAR_HOME=/h/%%u\"\n"),
        "{service}"
    );
    assert!(
        service.contains(r#"ExecStart="/opt/my tools/run" "it's 100%%" "$$HOME" "<&>""#),
        "{service}"
    );
    let plist = out.launchd_plist.unwrap();
    assert!(
        plist.contains("<string>it&apos;s 100%</string>")
            && plist.contains("<string>&lt;&amp;&gt;</string>")
    );
    let bad = render(
        ID,
        Trigger::Interval,
        "3600",
        "/bin/x",
        &["a\nb".to_owned()],
        Path::new("/h"),
    );
    assert!(bad.systemd_error.unwrap().contains("newline"));
}

/// systemd's own calendar evaluation of our `OnCalendar=` lines matches croner's.
#[test]
fn systemd_agrees_with_our_cron() {
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if !analyze.exists() {
        return; // Not on this machine: the goldens above still hold.
    }
    let base = "2026-12-05 10:07:00 UTC"; // a Saturday
    let base_t: SystemTime = chrono::DateTime::parse_from_rfc3339("2026-12-05T10:07:00Z")
        .unwrap()
        .into();
    for expr in [
        "*/15 * * * *",
        "30 2 * * 1-5",
        "0 12 1 * 1,3",
        "5 */6 1-10 2,4 *",
        "0 0 * * 0,6",
        "@monthly",
    ] {
        let timer = r(Trigger::Cron, expr).systemd_timer.unwrap();
        let mut theirs = Vec::new();
        for spec in timer.lines().filter_map(|l| l.strip_prefix("OnCalendar=")) {
            let out = std::process::Command::new(analyze)
                .args([
                    "calendar",
                    "--iterations=6",
                    &format!("--base-time={base}"),
                    spec,
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{spec}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let line = line.trim();
                if line.starts_with("Next elapse:") || line.starts_with("Iter. #") {
                    let when = line.split_once(": ").unwrap().1; // "Mon 2026-12-07 02:30:00 UTC"
                    let t =
                        chrono::NaiveDateTime::parse_from_str(&when[4..23], "%Y-%m-%d %H:%M:%S")
                            .unwrap();
                    theirs.push(t.and_utc());
                }
            }
        }
        theirs.sort();
        theirs.dedup();
        theirs.truncate(6);
        let cron = parse_cron(expr).unwrap();
        let mut ours = Vec::new();
        let mut t = base_t;
        for _ in 0..6 {
            t = cron.next_after(t);
            ours.push(chrono::DateTime::<chrono::Utc>::from(t));
        }
        assert_eq!(ours, theirs, "{expr}");
    }
}
