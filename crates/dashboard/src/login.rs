//! The dashboard's one-time login, the way Jupyter does it: the daemon mints a login secret,
//! publishes the login URL `http://127.0.0.1:<port>/#login=<secret>` in a `0600` file (the
//! primary daemon's `<token dir>/dashboard-login`) and in its log, and the page exchanges
//! the secret **once** for the read-only dashboard token (`GET /auth-token` with the secret
//! in the `X-Car-Login` header). Each successful exchange mints the next secret and rewrites
//! the file, so a login URL that leaked after use (a browser history, a shoulder) opens
//! nothing.
//!
//! Why: the dashboard token reads every agent's runs, approvals and events. Serving it to
//! any local process that asks (CAR's `GET /auth-token`) hands that view to every program
//! of every user on the machine; the login secret limits it to whoever can read the file or
//! the daemon's log — the user.
//!
//! The secret rides in the URL's fragment, which browsers never send to a server or put in
//! a `Referer`; the page strips it from the address bar before it exchanges it. The header
//! is a non-simple request header, so a foreign page's `fetch` needs a CORS preflight the
//! dashboard never grants.
//!
//! Concurrency: one `std::sync::Mutex` around the current secret, held for the comparison,
//! the rotation and the (small, atomic) file rewrite, so two racing exchanges of one secret
//! cannot both succeed and the file always holds the current secret. No callback runs under
//! it. The embedder removes the file when it stops (the daemon does at shutdown).

use std::path::PathBuf;
use std::sync::Mutex;

use car_proto::token::{mint_token, tokens_match};

/// The request header that carries the login secret.
pub const LOGIN_HEADER: &str = "x-car-login";

/// The file name of the login URL file in the daemon's token directory.
pub const LOGIN_FILE: &str = "dashboard-login";

/// The current login secret and where it is published.
#[derive(Debug)]
pub struct Login {
    current: Mutex<String>,
    base_url: String,
    file: Option<PathBuf>,
}

/// What an exchange attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    /// The secret was current: it is spent, and the next one is published.
    Accepted,
    /// No secret was presented.
    Missing,
    /// A secret was presented that is not (or no longer) the current one.
    Refused,
}

impl Login {
    /// Mints the first secret for the dashboard at `base_url` (`http://127.0.0.1:<port>/`),
    /// publishes it in `file` (when given) and logs the login URL.
    pub fn new(base_url: String, file: Option<PathBuf>) -> Self {
        let login = Login {
            current: Mutex::new(mint_token()),
            base_url,
            file,
        };
        let url = {
            let current = login.lock();
            login.publish(&current);
            login.url_for(&current)
        };
        match &login.file {
            Some(file) => tracing::info!(
                %url,
                file = %file.display(),
                "dashboard login: open this URL once (it is also in the file)"
            ),
            None => tracing::info!(%url, "dashboard login: open this URL once"),
        }
        login
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, String> {
        // A panic while holding the lock leaves a valid secret behind: keep serving.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn url_for(&self, secret: &str) -> String {
        format!("{}#login={secret}", self.base_url)
    }

    /// The current login URL (tests, and the refusal message's hint).
    pub fn url(&self) -> String {
        self.url_for(&self.lock())
    }

    /// Where the login URL is published, if anywhere.
    pub fn file(&self) -> Option<&PathBuf> {
        self.file.as_ref()
    }

    /// Checks `presented` against the current secret; on a match the secret is spent and
    /// the next one published.
    pub fn exchange(&self, presented: Option<&str>) -> Exchange {
        let Some(presented) = presented else {
            return Exchange::Missing;
        };
        let mut current = self.lock();
        if !tokens_match(&current, presented) {
            return Exchange::Refused;
        }
        *current = mint_token();
        self.publish(&current);
        if let Some(file) = &self.file {
            tracing::info!(file = %file.display(), "dashboard login used; the next login URL is in the file");
        }
        Exchange::Accepted
    }

    /// Writes the login URL for `secret` to the file (`0600`, atomically). A failure is
    /// logged: the dashboard keeps serving, and the log still names the first URL.
    fn publish(&self, secret: &str) {
        let Some(file) = &self.file else { return };
        let text = format!("{}\n", self.url_for(secret));
        if let Err(e) = car_proto::safe_file::write_atomic(file, text.as_bytes(), 0o600) {
            tracing::warn!(file = %file.display(), error = %e, "cannot write the dashboard login file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn secret_of(url: &str) -> String {
        url.split_once("#login=").unwrap().1.trim().to_string()
    }

    #[test]
    fn a_secret_opens_once_and_the_file_always_holds_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(LOGIN_FILE);
        let login = Login::new("http://127.0.0.1:9101/".into(), Some(file.clone()));
        let first = std::fs::read_to_string(&file).unwrap();
        assert!(
            first.starts_with("http://127.0.0.1:9101/#login="),
            "{first}"
        );
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let secret = secret_of(&first);

        assert_eq!(login.exchange(None), Exchange::Missing);
        assert_eq!(login.exchange(Some("guess")), Exchange::Refused);
        assert_eq!(login.exchange(Some(&secret)), Exchange::Accepted);
        assert_eq!(login.exchange(Some(&secret)), Exchange::Refused, "spent");

        let next = std::fs::read_to_string(&file).unwrap();
        assert_ne!(next, first);
        assert_eq!(next.trim(), login.url());
        assert_eq!(login.exchange(Some(&secret_of(&next))), Exchange::Accepted);
    }
}
