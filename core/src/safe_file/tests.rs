use super::*;

#[test]
fn reads_a_regular_file_within_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.toml");
    std::fs::write(&path, b"x = 1\n").unwrap();
    assert_eq!(read_text(&path, ReadLimits::cap(64)).unwrap(), "x = 1\n");
    let exact = read(&path, ReadLimits::cap(6)).unwrap();
    assert_eq!(exact.len(), 6, "exactly the cap is allowed");
    let err = read(&path, ReadLimits::cap(5)).unwrap_err();
    assert!(matches!(err, SafeFileError::TooLarge { size: 6, cap: 5 }));
    assert_eq!(err.to_string(), "is 6 bytes, over the cap of 5 bytes");
}

#[cfg(target_os = "linux")]
#[test]
fn devices_are_refused_without_reading() {
    for device in ["/dev/zero", "/dev/urandom", "/dev/null"] {
        let err = read(Path::new(device), ReadLimits::cap(1 << 20)).unwrap_err();
        assert!(
            matches!(err, SafeFileError::NotRegular(FileKind::CharDevice)),
            "{device}: {err}"
        );
        assert_eq!(err.to_string(), "is a character device, not a regular file");
    }
}

#[cfg(unix)]
#[test]
fn a_symlink_is_never_followed_even_to_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("secret");
    std::fs::write(&target, b"hunter2").unwrap();
    let link = dir.path().join("policy.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = read(&link, ReadLimits::cap(64)).unwrap_err();
    assert!(matches!(err, SafeFileError::Symlink));
    assert!(!err.to_string().contains("hunter2"));
    let dev = dir.path().join("zero.toml");
    std::os::unix::fs::symlink("/dev/zero", &dev).unwrap();
    assert!(matches!(
        read(&dev, ReadLimits::cap(64)).unwrap_err(),
        SafeFileError::Symlink
    ));
}

#[cfg(unix)]
#[test]
fn a_fifo_is_refused_at_once_instead_of_blocking_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.gguf");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    // Without O_NONBLOCK this open would wait for a writer forever.
    let err = open_regular(&fifo).unwrap_err();
    assert!(
        matches!(err, SafeFileError::NotRegular(FileKind::Fifo)),
        "{err}"
    );
}

#[test]
fn directories_and_missing_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = read(dir.path(), ReadLimits::cap(64)).unwrap_err();
    assert!(matches!(
        err,
        SafeFileError::NotRegular(FileKind::Directory)
    ));
    let err = read(&dir.path().join("missing"), ReadLimits::cap(64)).unwrap_err();
    assert!(err.is_not_found());
}

#[cfg(unix)]
#[test]
fn single_link_refuses_a_hard_linked_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    std::fs::write(&a, b"{}").unwrap();
    std::fs::hard_link(&a, dir.path().join("b")).unwrap();
    assert!(read(&a, ReadLimits::cap(64)).is_ok());
    let err = read(&a, ReadLimits::cap(64).single_link()).unwrap_err();
    assert!(matches!(err, SafeFileError::HardLinked(2)));
}

#[test]
fn reads_stop_at_the_cap_even_if_the_source_keeps_growing() {
    let err = read_at_most(std::io::repeat(b'x'), 1024, 10).unwrap_err();
    assert_eq!(
        err.to_string(),
        "grew past the cap of 1024 bytes while being read"
    );
}

#[test]
fn non_utf8_text_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bin");
    std::fs::write(&path, [0xff, 0xfe]).unwrap();
    assert!(matches!(
        read_text(&path, ReadLimits::cap(64)).unwrap_err(),
        SafeFileError::NotUtf8
    ));
}

#[cfg(unix)]
#[test]
fn write_atomic_replaces_a_symlink_instead_of_following_it_and_sets_the_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    let path = dir.path().join("out");
    std::os::unix::fs::symlink(&victim, &path).unwrap();
    write_atomic(&path, b"new", 0o600).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    let meta = std::fs::symlink_metadata(&path).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(TEMP_PREFIX))
        .collect();
    assert!(leftovers.is_empty());
}

#[cfg(unix)]
#[test]
fn create_exclusive_refuses_an_existing_name_or_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("e");
    std::fs::write(&existing, b"").unwrap();
    assert!(create_exclusive(&existing, 0o600).is_err());
    let link = dir.path().join("l");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
    assert!(create_exclusive(&link, 0o600).is_err());
    assert!(!dir.path().join("nowhere").exists());
}

#[cfg(unix)]
#[test]
fn write_atomic_sets_the_exact_mode_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared");
    // 0o666 would be 0o644 under the usual umask if the mode were only passed to open(2).
    write_atomic(&path, b"x", 0o666).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666);
}

#[cfg(unix)]
#[test]
fn open_append_refuses_a_symlink_a_fifo_and_a_directory() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("log");
    std::fs::write(&file, b"a").unwrap();
    open_append(&file).unwrap().write_all(b"b").unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"ab");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    assert!(matches!(
        open_append(&link).unwrap_err(),
        SafeFileError::Symlink
    ));
    let fifo = dir.path().join("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Opening a FIFO for writing with no reader fails (ENXIO) rather than blocking.
    assert!(open_append(&fifo).is_err());
    assert!(matches!(
        open_append(dir.path()).unwrap_err(),
        SafeFileError::Io(_) | SafeFileError::NotRegular(FileKind::Directory)
    ));
    assert_eq!(std::fs::read(&file).unwrap(), b"ab");
}
