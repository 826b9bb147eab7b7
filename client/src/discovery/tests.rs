use super::*;
use std::collections::{HashMap, HashSet};

#[derive(Default)]
struct FakeFs {
    files: HashMap<PathBuf, String>,
    sockets: HashSet<PathBuf>,
}

impl FileProbe for FakeFs {
    fn read_to_string(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }
    fn is_socket(&self, path: &Path) -> bool {
        self.sockets.contains(path)
    }
}

const HOME: &str = "/car-home";

fn env() -> EnvSnapshot {
    let mut e = EnvSnapshot::with_car_home(HOME);
    e.paths.platform = Platform::Linux;
    e
}

fn token_file() -> PathBuf {
    PathBuf::from(HOME).join("ai.parslee.car/auth-token")
}

fn socket() -> PathBuf {
    PathBuf::from(HOME).join("run/car-server.sock")
}

fn fs_with_token(text: &str) -> FakeFs {
    let mut fs = FakeFs::default();
    fs.files.insert(token_file(), text.into());
    fs
}

fn token(o: &Overrides, e: &EnvSnapshot, fs: &FakeFs) -> Option<(String, TokenSource)> {
    discover(o, e, fs)
        .unwrap()
        .token
        .map(|c| (c.secret.expose().to_string(), c.source))
}

#[test]
fn token_argument_beats_env_and_file() {
    let mut e = env();
    e.auth_token = Some(Secret::new("from-env".into()));
    let o = Overrides {
        token: Some(Secret::new("from-arg".into())),
        ..Overrides::default()
    };
    let got = token(&o, &e, &fs_with_token("from-file"));
    assert_eq!(got, Some(("from-arg".into(), TokenSource::Argument)));
}

#[test]
fn token_env_is_trimmed_and_beats_file() {
    let mut e = env();
    e.auth_token = Some(Secret::new("  tok-env\n".into()));
    let got = token(&Overrides::default(), &e, &fs_with_token("from-file"));
    assert_eq!(got, Some(("tok-env".into(), TokenSource::Env)));
}

#[test]
fn blank_env_token_falls_through_to_the_file() {
    for blank in ["", "   ", "\n\t"] {
        let mut e = env();
        e.auth_token = Some(Secret::new(blank.into()));
        let got = token(&Overrides::default(), &e, &fs_with_token(" tok-file \n"));
        assert_eq!(
            got,
            Some(("tok-file".into(), TokenSource::File(token_file())))
        );
    }
}

#[test]
fn blank_or_missing_file_means_no_token() {
    assert_eq!(
        token(&Overrides::default(), &env(), &FakeFs::default()),
        None
    );
    assert_eq!(
        token(&Overrides::default(), &env(), &fs_with_token(" \n")),
        None
    );
}

#[test]
fn token_file_follows_the_platform_rules() {
    let mut e = env();
    e.paths.car_home = None;
    e.paths.home = Some("/home/u".into());
    e.paths.xdg_runtime_dir = Some("/run/user/7".into());
    let mut fs = FakeFs::default();
    fs.files.insert(
        "/run/user/7/ai.parslee.car/auth-token".into(),
        "xdg-tok".into(),
    );
    let got = token(&Overrides::default(), &e, &fs);
    assert_eq!(got.map(|t| t.0), Some("xdg-tok".into()));
}

#[test]
fn url_precedence() {
    let fs = FakeFs::default();
    let url = |o: &Overrides, e: &EnvSnapshot| match discover(o, e, &fs).unwrap().endpoint {
        Endpoint::Tcp { url, .. } => url,
        other => panic!("{other:?}"),
    };
    assert_eq!(url(&Overrides::default(), &env()), DEFAULT_URL);
    let mut e = env();
    e.daemon_url = Some("ws://127.0.0.1:9200".into());
    assert_eq!(url(&Overrides::default(), &e), "ws://127.0.0.1:9200");
    let o = Overrides {
        url: Some("ws://localhost:9300/".into()),
        ..Overrides::default()
    };
    assert_eq!(url(&o, &e), "ws://localhost:9300/");
    e.daemon_url = Some("  ".into());
    assert_eq!(url(&Overrides::default(), &e), DEFAULT_URL);
}

#[test]
fn unix_socket_preferred_only_for_the_default_local_url() {
    let mut fs = FakeFs::default();
    fs.sockets.insert(socket());
    let d = discover(&Overrides::default(), &env(), &fs).unwrap();
    assert_eq!(d.endpoint, Endpoint::Unix { path: socket() });
    let mut e = env();
    e.daemon_url = Some("ws://localhost:9100/".into());
    assert!(matches!(
        discover(&Overrides::default(), &e, &fs).unwrap().endpoint,
        Endpoint::Unix { .. }
    ));
    e.daemon_url = Some("ws://127.0.0.1:9201".into());
    let d = discover(&Overrides::default(), &e, &fs).unwrap();
    assert_eq!(
        d.endpoint,
        Endpoint::Tcp {
            url: "ws://127.0.0.1:9201".into(),
            addr: "127.0.0.1:9201".into()
        }
    );
    // No socket file: TCP even for the default URL.
    let d = discover(&Overrides::default(), &env(), &FakeFs::default()).unwrap();
    assert!(matches!(d.endpoint, Endpoint::Tcp { .. }));
}

#[test]
fn car_server_socket_overrides_the_socket_path() {
    let mut e = env();
    e.paths.car_server_socket = Some("/tmp/elsewhere.sock".into());
    let mut fs = FakeFs::default();
    fs.sockets.insert(socket());
    assert!(matches!(
        discover(&Overrides::default(), &e, &fs).unwrap().endpoint,
        Endpoint::Tcp { .. }
    ));
    fs.sockets.insert("/tmp/elsewhere.sock".into());
    assert_eq!(
        discover(&Overrides::default(), &e, &fs).unwrap().endpoint,
        Endpoint::Unix {
            path: "/tmp/elsewhere.sock".into()
        }
    );
}

#[test]
fn memory_namespace_precedence() {
    let fs = FakeFs::default();
    let mut e = env();
    assert_eq!(
        discover(&Overrides::default(), &e, &fs)
            .unwrap()
            .memory_namespace,
        None
    );
    e.memory_namespace = Some("proj-a".into());
    assert_eq!(
        discover(&Overrides::default(), &e, &fs)
            .unwrap()
            .memory_namespace
            .as_deref(),
        Some("proj-a")
    );
    let o = Overrides {
        memory_namespace: Some("proj-b".into()),
        ..Overrides::default()
    };
    assert_eq!(
        discover(&o, &e, &fs).unwrap().memory_namespace.as_deref(),
        Some("proj-b")
    );
}

#[test]
fn host_token_is_read_from_its_own_file() {
    let mut fs = fs_with_token("daemon-tok");
    assert!(matches!(
        discover_host_token(&env(), &fs),
        Err(Error::Refused(m)) if m.contains("host token not found")
    ));
    fs.files.insert(
        PathBuf::from(HOME).join("ai.parslee.car/host-token"),
        "host-tok\n".into(),
    );
    let c = discover_host_token(&env(), &fs).unwrap();
    assert_eq!(c.secret.expose(), "host-tok");
}

#[test]
fn url_parsing() {
    let u = parse_ws_url("ws://[::1]:9100").unwrap();
    assert_eq!(
        (u.addr(), u.is_default_local()),
        ("[::1]:9100".into(), true)
    );
    assert_eq!(parse_ws_url("ws://example.com").unwrap().port, 80);
    assert!(!parse_ws_url("ws://127.0.0.1:9100/x")
        .unwrap()
        .is_default_local());
    assert!(matches!(parse_ws_url("wss://h:1"), Err(Error::Refused(m)) if m.contains("wss")));
    assert!(parse_ws_url("http://h:1").is_err());
    assert!(parse_ws_url("ws://:9100").is_err());
    assert!(parse_ws_url("ws://h:notaport").is_err());
}

#[test]
fn secrets_are_redacted_in_debug_output() {
    let c = Credential {
        secret: Secret::new("hunter2".into()),
        source: TokenSource::Env,
    };
    assert!(!format!("{c:?}").contains("hunter2"));
}

/// Runs `f` with a subscriber that captures WARN and above; returns what it wrote.
fn warnings_of<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

fn agent_of(o: &Overrides, e: &EnvSnapshot) -> Option<(String, String)> {
    discover(o, e, &FakeFs::default())
        .unwrap()
        .agent
        .map(|a| (a.agent_id, a.token.expose().clone()))
}

#[test]
fn agent_identity_needs_both_variables_trimmed() {
    let mut e = env();
    assert_eq!(agent_of(&Overrides::default(), &e), None);
    e.agent_id = Some(" agent-7 ".into());
    e.agent_token = Some(Secret::new("\tagent-tok\n".into()));
    assert_eq!(
        agent_of(&Overrides::default(), &e),
        Some(("agent-7".into(), "agent-tok".into()))
    );
    // A blank token is as good as none.
    e.agent_token = Some(Secret::new("  ".into()));
    assert_eq!(agent_of(&Overrides::default(), &e), None);
}

#[test]
fn only_one_agent_variable_warns_naming_the_missing_one() {
    let mut e = env();
    e.agent_id = Some("agent-7".into());
    let (got, logs) = warnings_of(|| agent_of(&Overrides::default(), &e));
    assert_eq!(got, None);
    assert!(
        logs.contains("CAR_AGENT_TOKEN is missing") && logs.contains("WARN"),
        "{logs}"
    );
    e.agent_id = None;
    e.agent_token = Some(Secret::new("lonely-agent-token".into()));
    let (got, logs) = warnings_of(|| agent_of(&Overrides::default(), &e));
    assert_eq!(got, None);
    assert!(logs.contains("CAR_AGENT_ID is missing"), "{logs}");
    assert!(!logs.contains("lonely-agent-token"), "{logs}");
    // Neither set: nothing to say.
    let (_, logs) = warnings_of(|| agent_of(&Overrides::default(), &env()));
    assert_eq!(logs, "");
}

#[test]
fn an_explicit_agent_beats_the_environment_and_must_not_be_blank() {
    let mut e = env();
    e.agent_id = Some("env-agent".into());
    e.agent_token = Some(Secret::new("env-tok".into()));
    let o = Overrides {
        agent: Some(AgentIdentity::new(" arg-agent", "arg-tok ")),
        ..Overrides::default()
    };
    assert_eq!(
        agent_of(&o, &e),
        Some(("arg-agent".into(), "arg-tok".into()))
    );
    for (id, token, field) in [("", "t", "agent_id"), ("a", " ", "token")] {
        let o = Overrides {
            agent: Some(AgentIdentity::new(id, token)),
            ..Overrides::default()
        };
        match discover(&o, &e, &FakeFs::default()) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(field), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn snapshots_and_discovery_results_never_show_a_token() {
    let mut e = env();
    e.auth_token = Some(Secret::new("daemon-s3cret".into()));
    e.agent_id = Some("agent-7".into());
    e.agent_token = Some(Secret::new("agent-s3cret".into()));
    let shown = format!("{e:?} {e:#?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("agent-7"), "{shown}");
    let found = discover(&Overrides::default(), &e, &FakeFs::default()).unwrap();
    let shown = format!("{found:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
}
