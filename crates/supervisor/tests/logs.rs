//! `tail_log` paging and copytruncate rotation against real log files.
#![cfg(target_os = "linux")]

mod common;

use std::io::Write;

use car_supervisor::{LogStream, Status, Supervisor, SupervisorError, TAIL_SCAN_BYTES};
use common::{wait_for, Env};

#[tokio::test]
async fn tail_pages_each_stream_from_the_end() {
    let env = Env::new();
    let sup = env.supervisor();
    let body = "for i in 1 2 3 4 5; do echo \"out $i\"; done\nfor i in 1 2 3; do echo \"err $i\" >&2; done";
    sup.start(env.spec("p", body)).await.unwrap();
    wait_for(&sup, "p", &[Status::Stopped]).await;

    let t = sup.tail_log("p", 2, LogStream::Combined, 0).unwrap();
    assert_eq!(t.stdout, ["out 4", "out 5"]);
    assert_eq!(t.stderr, ["err 2", "err 3"]);
    assert_eq!(t.lines, ["out 4", "out 5", "err 2", "err 3"]);
    assert_eq!((t.stdout_total, t.stderr_total, t.more), (5, 3, true));
    assert!(t.stdout_path.ends_with("logs/agents/p/stdout.log"));
    assert!(t.stderr_path.ends_with("logs/agents/p/stderr.log"));

    let all = sup.tail_log("p", 0, LogStream::Combined, 0).unwrap();
    assert_eq!(all.lines.len(), 8);
    assert!(!all.more);

    let page = sup.tail_log("p", 2, LogStream::Combined, 2).unwrap();
    assert_eq!(page.stdout, ["out 2", "out 3"]);
    assert_eq!(page.stderr, ["err 1"]);
    assert!(page.more, "out 1 is older");

    let out = sup.tail_log("p", 10, LogStream::Stdout, 0).unwrap();
    assert_eq!(out.lines, out.stdout);
    assert_eq!(
        (out.stderr.len(), out.stderr_total, out.more),
        (0, 0, false)
    );
    let err = sup.tail_log("p", 1, LogStream::Stderr, 0).unwrap();
    assert_eq!(err.lines, ["err 3"]);
    assert_eq!((err.stdout_total, err.more), (0, true));

    let json = serde_json::to_value(&t).unwrap();
    assert_eq!(json["stdout_total"], 5);
    assert_eq!(json["more"], true);
    env.assert_no_procs().await;
}

#[tokio::test]
async fn tail_reads_files_of_agents_never_started_here() {
    let env = Env::new();
    let sup = env.supervisor();
    let err = sup
        .tail_log("ghost", 5, LogStream::Combined, 0)
        .unwrap_err();
    assert!(matches!(err, SupervisorError::NoLogs { .. }), "{err}");

    let dir = env.logs_dir().join("agents/ghost");
    std::fs::create_dir_all(&dir).unwrap();
    let t = sup.tail_log("ghost", 5, LogStream::Combined, 0).unwrap();
    assert!(t.lines.is_empty() && !t.more);

    // Longer than the scan window: the tail is bounded and its partial line dropped.
    let mut file = std::fs::File::create(dir.join("stdout.log")).unwrap();
    let line_len = "line 0000000\n".len() as u64;
    let count = TAIL_SCAN_BYTES / line_len + 1000;
    let mut text = String::new();
    for i in 0..count {
        text.push_str(&format!("line {i:07}\n"));
    }
    file.write_all(text.as_bytes()).unwrap();
    drop(file);
    let mut config = env.config();
    config.log_max_bytes = u64::MAX; // no rotation here
    let sup = Supervisor::new(config);
    let t = sup.tail_log("ghost", 0, LogStream::Stdout, 0).unwrap();
    assert!(t.more);
    assert!(t.stdout_total < count as usize);
    assert!(t
        .stdout
        .iter()
        .all(|l| l.len() == 12 && l.starts_with("line ")));
    assert_eq!(t.stdout.last().unwrap(), &format!("line {:07}", count - 1));
    let t = sup.tail_log("ghost", 2, LogStream::Stdout, 1).unwrap();
    assert_eq!(
        t.stdout,
        [
            format!("line {:07}", count - 3),
            format!("line {:07}", count - 2)
        ]
    );
}

#[tokio::test]
async fn rotation_copytruncates_while_the_child_keeps_appending() {
    let env = Env::new();
    let mut config = env.config();
    config.log_max_bytes = 1000;
    config.log_keep = 2;
    let sup = Supervisor::new(config);
    // Chunk k is one `cat` write of ~1.4 KB, released by the file `go<k>`.
    let mut chunks = Vec::new();
    for k in 1..=3 {
        let chunk: String = (0..30)
            .map(|j| format!("chunk {k} line {j:02} ..........................\n"))
            .collect();
        std::fs::write(env.path().join(format!("chunk{k}")), &chunk).unwrap();
        chunks.push(chunk);
    }
    let body = "i=1\nwhile [ $i -le 3 ]; do\n  while [ ! -e \"$D/go$i\" ]; do sleep 0.02; done\n  \
                cat \"$D/chunk$i\"\n  i=$((i+1))\ndone\nexec sleep 1000";
    sup.start(env.spec("r", body)).await.unwrap();
    let log = |suffix: &str| env.log("r", &format!("stdout.log{suffix}"));
    let release = |k: usize| std::fs::write(env.path().join(format!("go{k}")), "").unwrap();

    // Chunk 1: the background tick rotates it (no tail_log involved).
    release(1);
    env.until("tick rotation", || log(".1") == chunks[0]).await;
    assert_eq!(log(""), "");

    // Chunks 2 and 3: written at the new end (O_APPEND), rotated by tail_log or the tick.
    for k in [2, 3] {
        release(k);
        let last = format!("chunk {k} line 29");
        env.until("the chunk", || {
            log("").contains(&last) || log(".1").contains(&last)
        })
        .await;
        let t = sup.tail_log("r", 10, LogStream::Stdout, 0).unwrap();
        assert!(t.lines.is_empty(), "rotated before reading: {:?}", t.lines);
        assert_eq!(log(".1"), chunks[k - 1], "no gap or NULs before the chunk");
        assert_eq!(log(""), "");
    }
    assert_eq!(log(".2"), chunks[1]);
    assert!(!env.logs_dir().join("agents/r/stdout.log.3").exists());
    sup.stop("r", false).await.unwrap();
    env.assert_no_procs().await;
}
