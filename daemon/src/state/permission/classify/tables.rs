//! The classifier's tables (see the parent module's docs for how each is matched).

/// Tool-name segments that make an action `full_access`: it reaches outside the sandbox
/// (messages, money, deployments, credentials, other people's systems) or destroys
/// beyond it.
#[rustfmt::skip]
pub const FULL_ACCESS_NAMES: &[&str] = &[
    "send", "email", "emails", "mail", "sms", "tweet", "publish", "broadcast", "slack",
    "discord", "telegram", "whatsapp", "webhook", "deploy", "undeploy", "push", "transfer",
    "pay", "payment", "payments", "charge", "purchase", "buy", "refund", "withdraw", "secret",
    "secrets", "credential", "credentials", "password", "passwords", "keychain", "apikey",
    "destroy", "drop", "truncate", "wipe", "purge", "nuke", "shutdown", "reboot", "poweroff",
    "kill", "sudo", "install", "uninstall", "grant", "revoke", "impersonate", "upload", "share",
    "exfiltrate",
];

/// Tool-name segments that make an action `sandbox_edit` (it changes things, locally).
#[rustfmt::skip]
pub const EDIT_NAMES: &[&str] = &[
    "write", "edit", "create", "update", "set", "put", "save", "store", "delete", "remove",
    "rm", "move", "mv", "rename", "copy", "cp", "mkdir", "insert", "upsert", "patch", "append",
    "modify", "replace", "apply", "run", "exec", "execute", "shell", "bash", "sh", "zsh",
    "command", "cmd", "build", "compile", "test", "format", "commit", "add", "download",
    "clone", "checkout", "reset", "restore", "archive", "extract", "unzip", "zip", "record",
    "remember", "forget", "note", "tag", "label", "schedule", "start", "stop", "restart",
    "spawn", "launch", "open", "click", "type", "generate",
];

/// Tool-name segments of reads: `read_only` and `reversible`.
#[rustfmt::skip]
pub const READ_NAMES: &[&str] = &[
    "read", "get", "list", "ls", "search", "find", "fetch", "query", "lookup", "view", "show",
    "describe", "inspect", "stat", "status", "info", "count", "glob", "grep", "cat", "head",
    "tail", "peek", "check", "validate", "verify", "calculate", "calc", "compute", "echo",
    "ping", "diff", "explain", "summarize", "summarise", "preview", "browse", "analyze",
    "analyse", "parse", "resolve", "estimate", "measure", "exists", "retrieve", "recall",
];

/// Tool-name segments of actions nothing undoes.
#[rustfmt::skip]
pub const IRREVERSIBLE_NAMES: &[&str] = &[
    "delete", "remove", "rm", "drop", "destroy", "truncate", "wipe", "purge", "nuke", "send",
    "email", "emails", "mail", "sms", "tweet", "publish", "broadcast", "slack", "discord",
    "telegram", "whatsapp", "webhook", "pay", "payment", "payments", "charge", "purchase",
    "buy", "transfer", "refund", "withdraw", "kill", "shutdown", "reboot", "poweroff", "exec",
    "execute", "run", "shell", "bash", "sh", "zsh", "command", "cmd", "share", "upload",
    "exfiltrate", "forget",
];

/// Tool-name segments of actions a later action can compensate.
#[rustfmt::skip]
pub const COMPENSABLE_NAMES: &[&str] = &[
    "write", "edit", "create", "update", "set", "put", "save", "store", "insert", "upsert",
    "patch", "append", "modify", "replace", "rename", "move", "mv", "copy", "cp", "mkdir",
    "add", "commit", "push", "deploy", "undeploy", "install", "uninstall", "schedule", "book",
    "reserve", "subscribe", "unsubscribe", "grant", "revoke", "tag", "label", "archive",
    "clone", "checkout", "start", "stop", "restart", "record", "remember", "note", "download",
    "apply", "reset", "restore",
];

/// Keys whose values are read as a command line.
#[rustfmt::skip]
pub const COMMAND_KEYS: &[&str] = &[
    "command", "cmd", "args", "argv", "flags",
];

/// Command-line keywords (single tokens or token sequences) that make an action
/// `full_access`: privilege, network egress, cloud and cluster control, publishing,
/// package installs, system control.
#[rustfmt::skip]
pub const COMMAND_KEYWORDS: &[&[&str]] = &[
    &["sudo"], &["su"], &["doas"], &["curl"], &["wget"], &["ssh"], &["scp"], &["sftp"],
    &["ftp"], &["rsync"], &["nc"], &["ncat"], &["netcat"], &["telnet"], &["socat"], &["aws"],
    &["gcloud"], &["gsutil"], &["az"], &["kubectl"], &["helm"], &["terraform", "apply"],
    &["terraform", "destroy"], &["pulumi", "up"], &["pulumi", "destroy"], &["git", "push"],
    &["docker", "push"], &["npm", "publish"], &["cargo", "publish"], &["twine", "upload"],
    &["gh", "release"], &["pip", "install"], &["npm", "install"], &["cargo", "install"],
    &["brew", "install"], &["apt", "install"], &["apt-get", "install"], &["mkfs"], &["dd"],
    &["shutdown"], &["reboot"], &["poweroff"], &["kill"], &["pkill"], &["killall"], &["chown"],
    &["crontab"], &["systemctl"], &["launchctl"], &["iptables"], &["sendmail"], &["mail"],
];

/// Last key segments that name a credential.
#[rustfmt::skip]
pub const CREDENTIAL_WORDS: &[&str] = &[
    "password", "passwd", "passphrase", "secret", "token", "credential", "credentials",
    "apikey", "authorization", "bearer", "privatekey",
];

/// `<qualifier> key` pairs that name a credential (`api_key`, `private_key`).
#[rustfmt::skip]
pub const KEY_QUALIFIERS: &[&str] = &[
    "api", "access", "secret", "private", "signing", "encryption", "ssh", "master", "client",
    "auth",
];

/// Last key segments whose values are read as target paths.
#[rustfmt::skip]
pub const PATH_KEYS: &[&str] = &[
    "path", "paths", "file", "files", "filename", "filepath", "dest", "destination", "target",
    "src", "source", "dir", "directory", "folder", "cwd", "output", "input", "location",
];

/// Phrases that make an action `full_access` (and `irreversible`) wherever they appear.
#[rustfmt::skip]
pub const DANGEROUS: &[&str] = &[
    "drop table", "drop database", "truncate table", "delete from", "rm -rf", "rm -fr",
    "rm -r -f", "git reset", "git push --force", "git push -f", "mkfs", "dd if=",
];
