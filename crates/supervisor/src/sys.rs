//! The only `unsafe` in the crate: thin `kill(2)`, `killpg(2)`, `getpgid(2)` and
//! `getpgrp(2)` wrappers returning `io::Result`.
//!
//! `signal_group` refuses process group ids that could hit more than one agent's group —
//! 0 (our own group), 1 and below, and the daemon's own group — so a corrupt pid record can
//! never make the supervisor signal the daemon or `init`.
#![allow(unsafe_code)]

use std::io;

/// Sends `sig` (0 only checks) to the process `pid`.
pub(crate) fn signal_process(pid: u32, sig: i32) -> io::Result<()> {
    let pid = checked_pid(pid)?;
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is a
    // positive single-process id (checked above), never 0 or -1 (broadcast forms).
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `sig` (0 only checks) to every process in the group `pgid`.
pub(crate) fn signal_group(pgid: i32, sig: i32) -> io::Result<()> {
    if pgid <= 1 || pgid == own_group() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: killpg(2) takes plain integers and touches no memory of ours; `pgid` is > 1
    // and not our own group (checked above).
    let rc = unsafe { libc::killpg(pgid, sig) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The process group of `pid`.
pub(crate) fn process_group_of(pid: u32) -> io::Result<i32> {
    let pid = checked_pid(pid)?;
    // SAFETY: getpgid(2) takes a plain integer and touches no memory of ours; `pid` > 0
    // (0 would mean "the caller").
    let pgid = unsafe { libc::getpgid(pid) };
    if pgid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pgid)
    }
}

/// The daemon's own process group.
fn own_group() -> i32 {
    // SAFETY: getpgrp(2) has no arguments or preconditions and cannot fail.
    unsafe { libc::getpgrp() }
}

fn checked_pid(pid: u32) -> io::Result<libc::pid_t> {
    match libc::pid_t::try_from(pid) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid pid {pid}"),
        )),
    }
}

/// `kill(pid, 0)` succeeds: the pid exists (possibly as a zombie) and we may signal it.
pub(crate) fn process_exists(pid: u32) -> bool {
    signal_process(pid, 0).is_ok()
}

/// Some process (possibly a zombie) is in group `pgid`, or we cannot tell (EPERM).
pub(crate) fn group_exists(pgid: i32) -> bool {
    match signal_group(pgid, 0) {
        Ok(()) => true,
        Err(e) => e.raw_os_error() != Some(libc::ESRCH) && e.kind() != io::ErrorKind::InvalidInput,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_dangerous_targets() {
        assert!(signal_group(0, 0).is_err());
        assert!(signal_group(1, 0).is_err());
        assert!(signal_group(-5, 0).is_err());
        assert!(signal_group(own_group(), 0).is_err());
        assert!(signal_process(0, 0).is_err());
        assert!(signal_process(u32::MAX, 0).is_err());
    }

    #[test]
    fn sees_itself() {
        assert!(process_exists(std::process::id()));
        assert_eq!(process_group_of(std::process::id()).unwrap(), own_group());
    }
}
