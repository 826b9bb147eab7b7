//! The page's files, compiled into the binary with `include_str!` (nothing is read from disk
//! or fetched at run time).
//!
//! `index.html` carries one placeholder, `{{PROTOCOL_VERSION}}`, filled once at start-up
//! from `car_proto::PROTOCOL_VERSION` so the page's `server.handshake` always sends the
//! version this build speaks (the page reads it from a `<meta>` tag: no inline script).

/// One file the dashboard serves.
#[derive(Debug, Clone)]
pub struct Asset {
    pub body: String,
    pub content_type: &'static str,
}

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

const PROTOCOL_PLACEHOLDER: &str = "{{PROTOCOL_VERSION}}";

/// The served files by path.
#[derive(Debug, Clone)]
pub struct Assets {
    index: Asset,
    app_js: Asset,
    app_css: Asset,
}

impl Assets {
    pub fn new() -> Self {
        Assets {
            index: Asset {
                body: INDEX_HTML.replace(
                    PROTOCOL_PLACEHOLDER,
                    &car_proto::PROTOCOL_VERSION.to_string(),
                ),
                content_type: "text/html; charset=utf-8",
            },
            app_js: Asset {
                body: APP_JS.to_string(),
                content_type: "text/javascript; charset=utf-8",
            },
            app_css: Asset {
                body: APP_CSS.to_string(),
                content_type: "text/css; charset=utf-8",
            },
        }
    }

    /// The asset served at `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Asset> {
        match path {
            "/" | "/index.html" => Some(&self.index),
            "/app.js" => Some(&self.app_js),
            "/app.css" => Some(&self.app_css),
            _ => None,
        }
    }
}

impl Default for Assets {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_carries_the_protocol_version_and_no_inline_script() {
        let assets = Assets::new();
        let index = &assets.get("/").unwrap().body;
        assert!(!index.contains(PROTOCOL_PLACEHOLDER));
        let meta = format!(
            r#"<meta name="car-protocol-version" content="{}">"#,
            car_proto::PROTOCOL_VERSION
        );
        assert!(index.contains(&meta), "{index}");
        // Every script is an external file (the CSP forbids inline script).
        for (i, _) in index.match_indices("<script") {
            let tag = &index[i..i + index[i..].find('>').unwrap()];
            assert!(tag.contains("src="), "inline script: {tag}");
        }
        assert!(
            !has_event_handler_attribute(index),
            "no inline event handlers"
        );
        assert!(!index.contains("style="), "no inline styles");
    }

    /// True when `html` has an ` on<letters>=` attribute (an inline event handler).
    fn has_event_handler_attribute(html: &str) -> bool {
        html.match_indices(" on").any(|(i, _)| {
            let rest = &html[i + 3..];
            let name_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            name_len > 0 && rest[name_len..].starts_with('=')
        })
    }

    #[test]
    fn page_script_never_parses_markup() {
        let assets = Assets::new();
        let js = &assets.get("/app.js").unwrap().body;
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!js.contains(sink), "app.js uses {sink}");
        }
    }

    #[test]
    fn paths() {
        let assets = Assets::new();
        assert_eq!(
            assets.get("/app.js").unwrap().content_type,
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            assets.get("/app.css").unwrap().content_type,
            "text/css; charset=utf-8"
        );
        assert!(assets.get("/auth-token").is_none());
        assert!(assets.get("/app.js.map").is_none());
    }
}
