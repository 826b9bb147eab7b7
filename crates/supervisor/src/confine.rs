//! File-access confinement of a supervised child with Landlock (Linux ≥ 5.13).
//!
//! A [`Confinement`] names paths the child must neither read nor write (`hidden`: the
//! daemon's state root and credential directory) and paths inside them it may use anyway
//! (`exposed`: its own agent directory, its working directory). Landlock is an allow-list,
//! so "everything but the hidden paths" is spelled as rules: walking down from `/` along
//! each hidden path's ancestors, every sibling entry that is neither hidden nor an ancestor
//! of a hidden path is allowed (all file-system rights, beneath it), and the exposed paths
//! are allowed on top. A symlink among those entries is allowed only when its target is
//! neither inside a hidden path nor an ancestor of one (a rule follows the link). Entries
//! created later in an ancestor directory (a new file directly in `$HOME`, say) are not
//! covered, so the child cannot use them; everything else behaves as before.
//!
//! The ruleset is built in the parent ([`prepare`]); the child, between `fork` and `exec`,
//! only makes two system calls (`PR_SET_NO_NEW_PRIVS`, `landlock_restrict_self`), which
//! allocate nothing. Where the kernel lacks Landlock, [`available`] is false and the
//! supervisor runs children unconfined (it logs that once and reports it per agent).

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, ABI,
};

/// What a child may not touch, and the exceptions inside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Paths the child can neither read nor write (nor list, nor execute beneath).
    pub hidden: Vec<PathBuf>,
    /// Paths (inside hidden ones) the child may use fully all the same.
    pub exposed: Vec<PathBuf>,
}

/// The newest Landlock ABI this code asks for (older kernels get what they support).
const WANTED: ABI = ABI::V5;

/// The Landlock ABI version the running kernel supports (0: none).
pub fn kernel_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, this system call
    // only returns the supported ABI version (or an error); it touches no memory.
    #[allow(unsafe_code)]
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    abi.max(0)
}

/// Whether the kernel can confine children.
pub fn available() -> bool {
    kernel_abi() > 0
}

/// The paths to allow so that everything but `hidden` stays reachable (see the module docs).
/// `hidden` must be absolute and canonical.
pub fn allowed_roots(hidden: &[PathBuf]) -> Vec<PathBuf> {
    let hidden: BTreeSet<&Path> = hidden.iter().map(PathBuf::as_path).collect();
    let ancestors: BTreeSet<&Path> = hidden.iter().flat_map(|h| h.ancestors().skip(1)).collect();
    let conflicts = |target: &Path| {
        hidden
            .iter()
            .any(|h| target.starts_with(h) || h.starts_with(target))
    };
    let mut allowed = Vec::new();
    let mut pending: Vec<PathBuf> = vec![PathBuf::from("/")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if hidden.contains(path.as_path()) {
                continue;
            }
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            if ancestors.contains(path.as_path()) && !is_link {
                pending.push(path);
                continue;
            }
            if is_link {
                match std::fs::canonicalize(&path) {
                    Ok(target) if !conflicts(&target) => allowed.push(path),
                    _ => {}
                }
                continue;
            }
            allowed.push(path);
        }
    }
    allowed
}

/// Builds the ruleset for `confinement`: the file descriptor the child restricts itself
/// with (`None` when the kernel supports no Landlock at all).
pub fn prepare(confinement: &Confinement) -> Result<Option<OwnedFd>, String> {
    let hidden: Vec<PathBuf> = confinement
        .hidden
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    let mut paths = allowed_roots(&hidden);
    paths.extend(confinement.exposed.iter().cloned());
    let all = AccessFs::from_all(WANTED);
    let ruleset = Ruleset::default()
        .handle_access(all)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(&paths, all)))
        .map_err(|e| format!("cannot build the Landlock ruleset: {e}"))?;
    Ok(ruleset.into())
}

/// Makes `cmd`'s child confine itself with `confinement` between `fork` and `exec`; answers
/// whether it will be confined (false where the kernel has no Landlock).
pub fn confine_command(
    cmd: &mut tokio::process::Command,
    confinement: &Confinement,
) -> Result<bool, String> {
    if !available() {
        return Ok(false);
    }
    let Some(ruleset) = prepare(confinement)? else {
        return Ok(false);
    };
    // SAFETY: the hook only makes two system calls (no allocation, no locks), as required
    // between fork and exec.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || restrict_self(&ruleset));
    }
    Ok(true)
}

/// In the child between `fork` and `exec`: restricts the process with `ruleset`.
///
/// # Safety
/// Async-signal-safe: two system calls, no allocation.
#[allow(unsafe_code)]
pub unsafe fn restrict_self(ruleset: &OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain system calls on integers and a file descriptor we own.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_but_the_hidden_subtree_is_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let secret = root.join("home/.car");
        std::fs::create_dir_all(secret.join("agents/a1")).unwrap();
        std::fs::create_dir_all(root.join("home/projects")).unwrap();
        std::fs::write(root.join("home/notes.txt"), "n").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("home/link-to-car")).unwrap();
        std::os::unix::fs::symlink(root.join("home"), root.join("link-to-home")).unwrap();
        std::os::unix::fs::symlink(root.join("home/projects"), root.join("link-ok")).unwrap();

        let allowed = allowed_roots(std::slice::from_ref(&secret));
        let has = |p: PathBuf| allowed.contains(&p);
        assert!(has(root.join("home/projects")));
        assert!(has(root.join("home/notes.txt")));
        assert!(has(root.join("link-ok")), "a link elsewhere is fine");
        assert!(!has(secret.clone()));
        assert!(!allowed.iter().any(|p| p.starts_with(&secret)));
        assert!(
            !has(root.join("home")),
            "an ancestor is walked, not allowed"
        );
        assert!(
            !has(root.join("home/link-to-car")),
            "a link into the hidden path"
        );
        assert!(!has(root.join("link-to-home")), "a link to an ancestor");
        assert!(has(PathBuf::from("/usr")), "{allowed:?}");
    }
}

#[cfg(test)]
mod enforced {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A real child under the ruleset: the hidden file is unreadable, the exposed one and
    /// the system's files are not (only where the kernel has Landlock).
    #[test]
    fn a_confined_child_reads_neither_the_hidden_files_nor_fewer_than_it_should() {
        if !available() {
            eprintln!("skipped: this kernel has no Landlock");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let hidden = dir.path().join("state");
        std::fs::create_dir_all(hidden.join("agents/me")).unwrap();
        std::fs::write(hidden.join("token"), "secret").unwrap();
        std::fs::write(hidden.join("agents/me/token"), "mine").unwrap();
        let confinement = Confinement {
            hidden: vec![hidden.clone()],
            exposed: vec![hidden.join("agents/me")],
        };
        let run = |path: PathBuf| {
            let ruleset = prepare(&confinement).unwrap().expect("a ruleset");
            let mut cmd = std::process::Command::new("/bin/cat");
            cmd.arg(path);
            // SAFETY: restrict_self only makes system calls.
            #[allow(unsafe_code)]
            unsafe {
                cmd.pre_exec(move || restrict_self(&ruleset));
            }
            cmd.output().unwrap()
        };
        assert!(!run(hidden.join("token")).status.success());
        assert_eq!(run(hidden.join("agents/me/token")).stdout, b"mine");
        assert!(run(PathBuf::from("/etc/passwd")).status.success());
    }
}
