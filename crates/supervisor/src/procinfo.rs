//! Process identity and liveness from `/proc` (Linux), with `kill(pid, 0)` fallbacks
//! elsewhere.
//!
//! A pid alone does not identify a process across daemon restarts (pids are reused), so a
//! pid record also stores the process's start time (`/proc/<pid>/stat` field 22, clock
//! ticks since boot). A recorded process "is still ours" when it exists, is not a zombie,
//! is still the leader of its recorded group, and (on Linux) has the recorded start time.
//! Off Linux the start time is unavailable and only existence and group are compared.
//!
//! Zombies count as gone everywhere: an exited group member whose parent does not reap it
//! (e.g. a container whose pid 1 never calls `wait`) must not make a stop wait forever.

use crate::sys;

/// The fields of `/proc/<pid>/stat` the supervisor uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    pub pgrp: i32,
    pub starttime: u64,
}

/// Parses a `/proc/<pid>/stat` line; the command name may contain spaces and `)`, so
/// fields are counted after the last `)`.
pub(crate) fn parse_stat(line: &str) -> Option<Stat> {
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")": field 3 (state) is index 0, 5 (pgrp) is 2, 22 (starttime) is 19.
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        starttime: fields.get(19)?.parse().ok()?,
    })
}

fn is_dead(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// `/proc/<pid>/stat`, or `None` (gone, or not Linux).
pub(crate) fn read_stat(pid: u32) -> Option<Stat> {
    if cfg!(target_os = "linux") {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&text)
    } else {
        None
    }
}

/// The start time to record for a freshly spawned child (`None` off Linux).
pub(crate) fn starttime(pid: u32) -> Option<u64> {
    read_stat(pid).map(|s| s.starttime)
}

/// Whether `pid` is still the live (non-zombie) leader of group `pgid` that we recorded,
/// with start time `starttime` where the platform has one.
pub(crate) fn is_same_process(pid: u32, pgid: i32, starttime: Option<u64>) -> bool {
    if i64::from(pid) != i64::from(pgid) || !sys::process_exists(pid) {
        return false;
    }
    if cfg!(target_os = "linux") {
        match (read_stat(pid), starttime) {
            (Some(stat), Some(recorded)) => {
                !is_dead(stat.state) && stat.pgrp == pgid && stat.starttime == recorded
            }
            // Gone meanwhile, or a record without a start time: cannot prove identity.
            _ => false,
        }
    } else {
        sys::process_group_of(pid).is_ok_and(|g| g == pgid)
    }
}

/// Whether any non-zombie process is left in group `pgid`.
pub(crate) fn group_alive(pgid: i32) -> bool {
    if !sys::group_exists(pgid) {
        return false;
    }
    if !cfg!(target_os = "linux") {
        return true;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            if stat.pgrp == pgid && !is_dead(stat.state) {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_comm() {
        let line = "4242 (we ird) (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.state, 'S');
        assert_eq!(stat.pgrp, 4242);
        assert_eq!(stat.starttime, 987654);
        assert!(parse_stat("12 (short) S 1").is_none());
        assert!(parse_stat("garbage").is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_own_stat() {
        let me = std::process::id();
        let stat = read_stat(me).unwrap();
        assert!(!is_dead(stat.state));
        assert_eq!(starttime(me), Some(stat.starttime));
        // The test process is usually not a group leader; identity needs pid == pgid.
        let pgid = i32::try_from(me).unwrap();
        assert_eq!(
            is_same_process(me, pgid, Some(stat.starttime)),
            stat.pgrp == pgid
        );
        assert!(!is_same_process(me, pgid, Some(stat.starttime + 1)));
    }
}
