//! A small W3C WebDriver client (JSON over HTTP) driving Debian's headless chromium through
//! chromedriver: the few commands the console tests need, no crate.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use super::http;

pub struct Browser {
    driver: tokio::process::Child,
    addr: SocketAddr,
    session: String,
    profile: std::path::PathBuf,
}

/// Why the browser tier cannot run here, if it cannot.
pub fn missing() -> Option<&'static str> {
    let found = |name: &str| {
        std::process::Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if !found("chromium") {
        Some("chromium is not installed (apt-get install chromium)")
    } else if !found("chromedriver") {
        Some("chromedriver is not installed (apt-get install chromium-driver)")
    } else {
        None
    }
}

/// `None` (and "not run" on stderr) when the browser is missing, unless PGVS3_REQUIRE_BROWSER
/// says a missing browser is a failure.
pub async fn launch() -> Option<Browser> {
    if let Some(why) = missing() {
        assert!(
            std::env::var_os("PGVS3_REQUIRE_BROWSER").is_none(),
            "browser tier not run: {why}, and PGVS3_REQUIRE_BROWSER is set"
        );
        eprintln!("browser tier not run: {why}");
        return None;
    }
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let driver = tokio::process::Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromedriver");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "chromedriver listens within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let profile = std::env::temp_dir().join(format!("pgvs3-console-chromium-{}-{port}", std::process::id()));
    let capabilities = json!({"capabilities": {"alwaysMatch": {
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,900", format!("--user-data-dir={}", profile.display())]
        }
    }}});
    let created = command(addr, "POST", "/session", Some(capabilities)).await;
    let session = created["sessionId"].as_str().expect("a WebDriver session").to_owned();
    Some(Browser {
        driver,
        addr,
        session,
        profile,
    })
}

/// Sends one WebDriver command: its HTTP status and JSON answer.
async fn send(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    // A POST without parameters still sends an (empty) JSON object.
    let body = match body {
        Some(body) => body.to_string(),
        None if method == "POST" => "{}".to_owned(),
        None => String::new(),
    };
    let answer = http(
        addr,
        method,
        path,
        &[("Content-Type", "application/json; charset=utf-8")],
        &body,
    )
    .await;
    (answer.status, serde_json::from_str(&answer.body).unwrap_or(Value::Null))
}

async fn command(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> Value {
    let (status, value) = send(addr, method, path, body).await;
    assert!(status == 200, "WebDriver {method} {path}: {status} {value}");
    value["value"].clone()
}

impl Browser {
    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        command(self.addr, method, &format!("/session/{}{path}", self.session), body).await
    }

    pub async fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url }))).await;
    }

    pub async fn url(&self) -> String {
        self.call("GET", "/url", None).await.as_str().unwrap().to_owned()
    }

    pub async fn source(&self) -> String {
        self.call("GET", "/source", None).await.as_str().unwrap().to_owned()
    }

    /// The element `css` selects, waiting up to 20 s for it to appear.
    pub async fn find(&self, css: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let answer = http(
                self.addr,
                "POST",
                &format!("/session/{}/element", self.session),
                &[("Content-Type", "application/json")],
                &json!({ "using": "css selector", "value": css }).to_string(),
            )
            .await;
            if answer.status == 200 {
                let value: Value = serde_json::from_str(&answer.body).unwrap();
                let element = value["value"].as_object().unwrap().values().next().unwrap();
                return element.as_str().unwrap().to_owned();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {css} within 20 s on {}:\n{}",
                self.url().await,
                self.source().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs `action` (`method` on `/element/{id}{action}`) on the element `css` selects. The page
    /// re-renders parts of itself when its fetches answer, so the element found may be replaced
    /// before the action reaches it ("stale element reference"): then it is found again and the
    /// action retried, within 20 s, as a person would click the list that just redrew.
    async fn on_element(&self, css: &str, method: &str, action: &str, body: Option<Value>) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let element = self.find(css).await;
            let path = format!("/session/{}/element/{element}{action}", self.session);
            let (status, value) = send(self.addr, method, &path, body.clone()).await;
            let stale = status == 404 && value["value"]["error"] == "stale element reference";
            if !stale || tokio::time::Instant::now() >= deadline {
                assert!(status == 200, "WebDriver {method} {path} ({css}): {status} {value}");
                return value["value"].clone();
            }
        }
    }

    pub async fn click(&self, css: &str) {
        self.on_element(css, "POST", "/click", None).await;
    }

    pub async fn clear(&self, css: &str) {
        self.on_element(css, "POST", "/clear", None).await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        self.on_element(css, "POST", "/value", Some(json!({ "text": text })))
            .await;
    }

    pub async fn text(&self, css: &str) -> String {
        self.on_element(css, "GET", "/text", None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page.
    pub async fn run(&self, script: &str, args: Vec<Value>) -> Value {
        self.call("POST", "/execute/sync", Some(json!({ "script": script, "args": args })))
            .await
    }

    /// Accepts the page's `confirm()` once it shows, within 10 s.
    pub async fn accept_dialog(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = http(
                self.addr,
                "POST",
                &format!("/session/{}/alert/accept", self.session),
                &[("Content-Type", "application/json")],
                "{}",
            )
            .await;
            if answer.status == 200 {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "a dialog within 10 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn cookies(&self) -> Value {
        self.call("GET", "/cookie", None).await
    }

    /// A PNG of the viewport into `$PGVS3_CONSOLE_SCREENSHOTS/<name>.png`, when that is set
    /// (how docs/console/*.png are made).
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("PGVS3_CONSOLE_SCREENSHOTS") else {
            return;
        };
        use base64::Engine;
        let png = self.call("GET", "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }

    pub async fn quit(mut self) {
        let _ = http(self.addr, "DELETE", &format!("/session/{}", self.session), &[], "").await;
        let _ = self.driver.kill().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
