//! fleetd's live cluster page (issue 17) in a real browser: Debian's headless Chromium, driven over WebDriver
//! (chromedriver) by fantoccini, against a 3-machine cluster. The page is opened once; units started and destroyed
//! with fleetctl must appear, change and vanish in its cells without a reload (a marker the page's script sets at
//! load survives), a health-checked unit's cells show its health, a unit's detail opens in place, and the plain
//! table serves the same state to a client without JavaScript. A screenshot of the page is kept at
//! `target/ui/cluster-page.png` (printed by `ci/test`).
//!
//! Issue 38: on a TLS cluster the admin role pauses and resumes a running rollout and cordons a machine from the
//! page (each previewed and confirmed in its dialog), the registry shows each change, a write without the page's
//! token is refused, and the read role's page offers no action (screenshots `cluster-page-rollouts.png` and
//! `cluster-page-confirm.png` beside the first). The admin's certificate is presented by a test-only TLS forwarder
//! on loopback ([`forwarder`]), not by the browser.
//!
//! Without `/usr/bin/chromium` or `/usr/bin/chromedriver` (or `CHROMIUM` / `CHROMEDRIVER`) the test fails and says
//! which package to install; it never skips.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use fleet_harness::{Check, Cluster, Output};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Metadata rendered in a column header; the markup in it must arrive as text.
const ROLE: &str = "<i>web</i>";

fn ok(out: &Output, what: &str) {
    assert!(out.success(), "{what}: {}", out.describe());
}

fn executable(variable: &str, default: &str, package: &str) -> PathBuf {
    let path = std::env::var_os(variable).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(default));
    assert!(
        path.is_file(),
        "the cluster page's browser test needs {} (Debian package `{package}`, installed by `ci/setup packages`; \
         or set {variable}): not found",
        path.display()
    );
    path
}

/// chromedriver on a port of its own choosing; killed when dropped.
struct Driver {
    _process: tokio::process::Child,
    url: String,
}

impl Driver {
    async fn start(chromedriver: &Path) -> Driver {
        let mut process = tokio::process::Command::new(chromedriver)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", chromedriver.display()));
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let mut seen = Vec::new();
        let port = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                // "ChromeDriver was started successfully on port 36875."
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    return rest.trim_end_matches('.').parse::<u16>().ok();
                }
                seen.push(line);
            }
            None
        })
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("chromedriver did not say which port it listens on; it printed: {seen:?}"));
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Driver { _process: process, url: format!("http://127.0.0.1:{port}") }
    }
}

/// A headless Chromium session with the flags this machine needs (no sandbox as root; no background network,
/// which the closed network refuses) and a fresh profile.
async fn browser(driver: &Driver, chromium: &Path, profile: &Path) -> Client {
    let args = [
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--disable-dev-shm-usage".into(),
        "--no-proxy-server".into(),
        "--window-size=1400,720".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("goog:chromeOptions".into(), json!({ "binary": chromium, "args": args }));
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .unwrap_or_else(|e| panic!("chromedriver at {} could not start {}: {e}", driver.url, chromium.display()))
}

/// The text of the first element `css` selects, or why there is none.
async fn text(browser: &Client, css: &str) -> Result<String, String> {
    let element = browser.find(Locator::Css(css)).await.map_err(|e| format!("no element {css}: {e}"))?;
    element.text().await.map_err(|e| format!("text of {css}: {e}"))
}

/// The page's load marker (set by its script once per load).
async fn load_marker(browser: &Client) -> String {
    match browser.execute("return window.fleetPageLoad || null;", vec![]).await {
        Ok(Value::String(marker)) => marker,
        other => panic!("the page's script set no load marker: {other:?}"),
    }
}

/// Waits until the row of `unit` shows `want` in the cell of every machine in `machines` (IDs), as the page shows it.
async fn wait_cells(cluster: &Cluster, browser: &Client, unit: &str, machines: &[String], want: &str) {
    let what = format!("the page's row of {unit} to show {want} on {} machine(s) without a reload", machines.len());
    cluster
        .wait_for(&what, || async {
            let mut seen = Vec::new();
            for machine in machines {
                let css = format!(r#"tr[data-unit="{unit}"] td.cell[data-machine="{machine}"]"#);
                match text(browser, &css).await {
                    Ok(cell) if cell == want => {}
                    Ok(cell) => seen.push(format!("{}: {cell:?}", &machine[..8])),
                    Err(why) => seen.push(why),
                }
            }
            if seen.is_empty() {
                Check::Ready(())
            } else {
                let status = text(browser, "#status").await.unwrap_or_else(|e| e);
                Check::NotYet(format!("{}; page status {status:?}", seen.join(", ")))
            }
        })
        .await
        .unwrap();
}

/// One `GET` over plain HTTP/1.1 from the host (no JavaScript anywhere): status line, headers and body.
async fn http_get(addr: &str, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

fn screenshot_path() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("ui/cluster-page.png")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_page_follows_units_live_without_a_reload() {
    let chromium = executable("CHROMIUM", "/usr/bin/chromium", "chromium");
    let chromedriver = executable("CHROMEDRIVER", "/usr/bin/chromedriver", "chromium-driver");
    let cluster = Cluster::builder()
        .machines(3)
        .agent_ttl("3s")
        .metadata(1, &format!("region=eu,role={ROLE}"))
        .start()
        .await
        .unwrap();
    let machines: Vec<String> = cluster.machines().iter().map(|m| m.id().to_string()).collect();
    let m1 = cluster.machine(1).unwrap();
    let api = format!("{}:{}", m1.ip(), fleet_harness::API_PORT);

    let driver = Driver::start(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let browser = browser(&driver, &chromium, profile.path()).await;
    let page = format!("http://{api}/ui/");
    browser.goto(&page).await.unwrap_or_else(|e| panic!("open {page}: {e}"));
    cluster
        .wait_for("the page to follow the registry (status `live · …`)", || async {
            match text(&browser, "#status").await {
                Ok(status) if status.starts_with("live · ") => Check::Ready(()),
                Ok(status) => Check::NotYet(format!("status {status:?}")),
                Err(why) => Check::NotYet(why),
            }
        })
        .await
        .unwrap();
    let marker = load_marker(&browser).await;
    // Without roles (plain TCP here, the Unix socket alike: `Access::Unrestricted`) the page is read-only.
    let offered = browser.find_all(Locator::Css("button.act, meta[name=fleet-token]")).await.unwrap();
    assert!(offered.is_empty(), "the page without roles offers {} action(s) or a token", offered.len());
    let header = text(&browser, &format!(r#"th.machine[data-machine="{}"]"#, machines[0])).await.unwrap();
    assert!(header.contains("region=eu") && header.contains(&format!("role={ROLE}")), "m1's column: {header:?}");

    // Units started after the page opened appear and go active in place.
    let units = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/units");
    let hello = format!("{units}/hello.service");
    let global = format!("{units}/global.service");
    ok(&cluster.fleetctl(1, &["start", "--no-block", &hello]).await.unwrap(), "fleetctl start hello.service");
    let active = cluster.wait_for_n_active_units(1, 1).await.unwrap();
    let hello_on = machines.iter().find(|id| id.starts_with(active["hello.service"].as_str())).cloned().unwrap();
    wait_cells(&cluster, &browser, "hello.service", std::slice::from_ref(&hello_on), "active/running").await;
    ok(&cluster.fleetctl(1, &["start", "--no-block", &global]).await.unwrap(), "fleetctl start global.service");
    wait_cells(&cluster, &browser, "global.service", &machines, "active/running").await;
    // A unit with a health check shows its health in its cell (docs/health.md); the others' cells are unchanged.
    let checked_dir = tempfile::tempdir().unwrap();
    let checked = checked_dir.path().join("checked.service");
    std::fs::write(
        &checked,
        "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nGlobal=true\nHealthCheck=echo fine\nHealthCheckInterval=1s\n",
    )
    .unwrap();
    let checked = checked.display().to_string();
    ok(&cluster.fleetctl(1, &["start", "--no-block", &checked]).await.unwrap(), "fleetctl start checked.service");
    wait_cells(&cluster, &browser, "checked.service", &machines, "active/running healthy").await;
    assert_eq!(load_marker(&browser).await, marker, "the page was reloaded while units started");

    // The detail opens in place: file, full hash, versions and the changes this fleetd saw.
    let listed =
        cluster.fleetctl(1, &["list-unit-files", "--no-legend", "--full", "--fields", "unit,hash"]).await.unwrap();
    ok(&listed, "fleetctl list-unit-files");
    let hash = listed
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix("hello.service").map(|rest| rest.trim().to_string()))
        .unwrap_or_else(|| panic!("no hash of hello.service in: {}", listed.describe()));
    browser.find(Locator::Css(r#"tr[data-unit="hello.service"] a.unit"#)).await.unwrap().click().await.unwrap();
    cluster
        .wait_for("the detail of hello.service to open with its hash, file and state changes", || async {
            let name = text(&browser, "#detail-name").await;
            let shown = text(&browser, "#detail-hash").await;
            let history = text(&browser, "#detail-history").await.unwrap_or_default();
            let file = text(&browser, "#detail pre.file").await.unwrap_or_default();
            if name.as_deref() == Ok("hello.service")
                && shown.as_deref() == Ok(hash.as_str())
                && history.contains("active/running")
                && file.contains("Hello, World!")
            {
                Check::Ready(())
            } else {
                Check::NotYet(format!("name {name:?}, hash {shown:?}, history {history:?}, file {file:?}"))
            }
        })
        .await
        .unwrap();
    let png = browser.screenshot().await.expect("screenshot of the cluster page");
    let path = screenshot_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, png).unwrap();
    println!("cluster page screenshot: {}", path.display());

    // The table without JavaScript: the same cells, server-rendered.
    let plain = http_get(&api, "/ui/?plain").await;
    assert!(plain.starts_with("HTTP/1.1 200"), "GET /ui/?plain: {plain}");
    assert!(!plain.contains("<script"), "the plain table carries a script: {plain}");
    let cell = format!(r#"data-machine="{hello_on}" title="#);
    let row = plain.lines().find(|l| l.starts_with(r#"<tr data-unit="hello.service">"#)).unwrap_or_else(|| {
        panic!("the plain table has no row of hello.service: {plain}");
    });
    assert!(row.contains(&cell) && row.contains(">active/running</td>"), "hello.service in the plain table: {row}");
    assert!(plain.contains("role=&lt;i&gt;web&lt;/i&gt;"), "m1's metadata is not escaped in the plain table: {plain}");

    // A destroyed unit leaves the page, still without a reload.
    ok(&cluster.fleetctl(1, &["destroy", &hello]).await.unwrap(), "fleetctl destroy");
    cluster
        .wait_for("hello.service's row to leave the page", || async {
            match browser.find_all(Locator::Css(r#"tr[data-unit="hello.service"]"#)).await {
                Ok(rows) if rows.is_empty() => Check::Ready(()),
                Ok(rows) => Check::NotYet(format!("{} row(s) of hello.service", rows.len())),
                Err(e) => Check::NotYet(e.to_string()),
            }
        })
        .await
        .unwrap();
    assert_eq!(load_marker(&browser).await, marker, "the page was reloaded while a unit was destroyed");
    browser.close().await.unwrap();
}

/// One request over TLS with `client`'s certificate; reads until `enough` is in the answer (or the server closes).
async fn https(cluster: &Cluster, client: &fleet_harness::pki::CertFiles, request: &str, enough: &str) -> String {
    let pki = cluster.tls().expect("a TLS cluster");
    let m1 = cluster.machine(1).unwrap();
    let config = fleet_harness::pki::client_config(pki.ca.cert(), Some(client)).unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect((m1.ip(), fleet_harness::API_PORT)).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(m1.ip().to_string()).unwrap();
    let mut stream = connector.connect(name, tcp).await.unwrap_or_else(|e| panic!("TLS handshake with m1: {e}"));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 8192];
    let read_all = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
            if String::from_utf8_lossy(&answer).contains(enough) {
                break;
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), read_all).await.is_err() {
        panic!("no {enough:?} within 30 s in the answer to {request:?}: {}", String::from_utf8_lossy(&answer));
    }
    String::from_utf8_lossy(&answer).into_owned()
}

/// On a secure cluster the page sits behind the API's TLS and roles: the read-only role sees the table and the
/// event stream; writing methods stay refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_role_sees_the_page_over_tls() {
    let cluster = Cluster::builder().machines(1).agent_ttl("3s").tls(true).start().await.unwrap();
    let hello = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/units/hello.service");
    ok(&cluster.fleetctl(1, &["start", hello]).await.unwrap(), "fleetctl start (admin role)");
    let read = &cluster.tls().unwrap().read;
    let get = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: m1\r\nConnection: close\r\n\r\n");

    let plain = https(&cluster, read, &get("/ui/?plain"), "</html>").await;
    assert!(plain.starts_with("HTTP/1.1 200"), "read role, GET /ui/?plain: {plain}");
    assert!(plain.contains(r#"<tr data-unit="hello.service">"#), "read role, GET /ui/?plain: {plain}");

    let events = https(&cluster, read, &get("/ui/events"), "event: board").await;
    assert!(events.starts_with("HTTP/1.1 200"), "read role, GET /ui/events: {events}");
    assert!(events.contains("content-type: text/event-stream"), "read role, GET /ui/events: {events}");

    let post = "POST /ui/ HTTP/1.1\r\nHost: m1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let refused = https(&cluster, read, post, "\r\n\r\n{").await;
    assert!(refused.starts_with("HTTP/1.1 403"), "read role, POST /ui/: {refused}");
}

/// A test-only TLS forwarder on loopback: the browser speaks plain HTTP to `127.0.0.1:<port>`, the forwarder
/// presents `client`'s certificate to m1's API over TLS. Headless Chromium cannot be made to pick a client
/// certificate without a system-wide policy, so the forwarder stands in for the browser's certificate; fleetd sees
/// exactly the TLS connection, subject and role a browser holding that certificate would give it. The page's own
/// requests (`Host`, `Origin`, `Sec-Fetch-*`) pass through unchanged. Ends with the test's runtime.
async fn forwarder(cluster: &Cluster, client: &fleet_harness::pki::CertFiles) -> String {
    let pki = cluster.tls().expect("a TLS cluster");
    let m1 = cluster.machine(1).unwrap().ip().to_string();
    let config = fleet_harness::pki::client_config(pki.ca.cert(), Some(client)).unwrap();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut browser, _)) = listener.accept().await {
            let (connector, m1) = (connector.clone(), m1.clone());
            tokio::spawn(async move {
                let Ok(tcp) = tokio::net::TcpStream::connect((m1.as_str(), fleet_harness::API_PORT)).await else {
                    return;
                };
                let name = rustls::pki_types::ServerName::try_from(m1).unwrap();
                let Ok(mut fleetd) = connector.connect(name, tcp).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut browser, &mut fleetd).await;
            });
        }
    });
    format!("http://{local}/ui/")
}

/// The rollout as the API shows it to the admin role (JSON).
async fn rollout_json(cluster: &Cluster, id: &str) -> Value {
    let admin = &cluster.tls().unwrap().admin;
    let get = format!("GET /fleet/v1/rollouts/{id} HTTP/1.1\r\nHost: m1\r\nConnection: close\r\n\r\n");
    let answer = https(cluster, admin, &get, "\r\n\r\n{").await;
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("GET rollout {id}: {e}: {answer}"))
}

/// Clicks the page's action button `css`, waits for the confirmation dialog to show the server's preview (a line
/// containing `summary_has`), takes a screenshot if asked, and confirms.
async fn act_and_confirm(cluster: &Cluster, browser: &Client, css: &str, summary_has: &str, shot: Option<&str>) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no action button {css}: {e}"))
        .click()
        .await
        .unwrap();
    cluster
        .wait_for(&format!("the confirmation of {css} to show its preview"), || async {
            let summary = text(browser, "#confirm-summary").await.unwrap_or_default();
            let error = text(browser, "#confirm-error").await.unwrap_or_default();
            let enabled = browser.execute("return !document.getElementById('confirm-ok').disabled;", vec![]).await;
            if summary.contains(summary_has) && matches!(enabled, Ok(Value::Bool(true))) {
                Check::Ready(())
            } else {
                Check::NotYet(format!("summary {summary:?}, error {error:?}"))
            }
        })
        .await
        .unwrap();
    if let Some(name) = shot {
        save_screenshot(browser, name).await;
    }
    browser.find(Locator::Id("confirm-ok")).await.unwrap().click().await.unwrap();
    cluster
        .wait_for("the dialog to close once the API accepted the write", || async {
            match browser.execute("return document.getElementById('confirm').open;", vec![]).await {
                Ok(Value::Bool(false)) => Check::Ready(()),
                other => Check::NotYet(format!(
                    "open: {other:?}, error {:?}",
                    text(browser, "#confirm-error").await.unwrap_or_default()
                )),
            }
        })
        .await
        .unwrap();
}

async fn save_screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("screenshot");
    let path = screenshot_path().with_file_name(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
}

/// Issue 38: the admin role acts from the page. A rolling replace of a global unit holds each machine for 10
/// minutes, so the rollout is running while the browser pauses it, resumes it (each previewed and confirmed in the
/// dialog), and cordons a machine; the registry shows each change. The read role's page on the same cluster offers
/// no action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_page_pauses_and_resumes_a_rollout_and_cordons_a_machine() {
    let chromium = executable("CHROMIUM", "/usr/bin/chromium", "chromium");
    let chromedriver = executable("CHROMEDRIVER", "/usr/bin/chromedriver", "chromium-driver");
    let cluster = Cluster::builder().machines(3).agent_ttl("3s").tls(true).start().await.unwrap();
    let machines: Vec<String> = cluster.machines().iter().map(|m| m.id().to_string()).collect();
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("db.service");
    let body = "[Service]\nExecStart=/bin/sleep 100000\n\n[X-Fleet]\nGlobal=true\n";
    std::fs::write(&unit, body).unwrap();
    let unit = unit.display().to_string();
    ok(&cluster.fleetctl(1, &["start", &unit]).await.unwrap(), "fleetctl start db.service");
    std::fs::write(&unit, body.replace("100000", "100001")).unwrap();
    let rolling = ["start", "--replace", "--rolling", "--max-unavailable=1", "--min-healthy=10m", "--no-block", &unit];
    let started = cluster.fleetctl(1, &rolling).await.unwrap();
    ok(&started, "fleetctl start --replace --rolling");
    let id = started
        .stdout
        .split_whitespace()
        .skip_while(|w| *w != "Rollout")
        .nth(1)
        .unwrap_or_else(|| panic!("no rollout ID in: {}", started.describe()))
        .to_string();

    let driver = Driver::start(&chromedriver).await;
    let profile = tempfile::tempdir().unwrap();
    let browser = browser(&driver, &chromium, profile.path()).await;
    let admin_page = forwarder(&cluster, &cluster.tls().unwrap().admin).await;
    browser.goto(&admin_page).await.unwrap_or_else(|e| panic!("open {admin_page}: {e}"));
    let row = format!(r#"tr[data-rollout="{id}"]"#);
    let wait_state = |want: &'static str, button: &'static str| {
        let (row, browser, cluster) = (row.clone(), &browser, &cluster);
        async move {
            cluster
                .wait_for(&format!("the page to show rollout state {want} with a {button} button"), || async {
                    let state = text(browser, &format!("{row} td.rstate .state")).await;
                    let offered =
                        browser.find_all(Locator::Css(&format!("{row} button.act[data-action={button}]"))).await;
                    match (state, offered) {
                        (Ok(s), Ok(b)) if s == want && b.len() == 1 => Check::Ready(()),
                        (s, b) => {
                            Check::NotYet(format!("state {s:?}, {} {button} button(s)", b.map_or(0, |b| b.len())))
                        }
                    }
                })
                .await
                .unwrap()
        }
    };
    wait_state("running", "pause").await;
    let steps = text(&browser, &format!("{row} table.steps")).await.unwrap();
    assert!(steps.contains("db.service") && steps.contains("pending"), "per-machine steps: {steps:?}");
    save_screenshot(&browser, "cluster-page-rollouts.png").await;

    act_and_confirm(
        &cluster,
        &browser,
        &format!("{row} button.act[data-action=pause]"),
        "to paused",
        Some("cluster-page-confirm.png"),
    )
    .await;
    let stored = rollout_json(&cluster, &id).await;
    assert_eq!(stored["action"], "pause", "the registry's control after the page's pause: {stored}");
    wait_state("paused", "resume").await;
    let reason = text(&browser, &format!("{row} .reason")).await.unwrap_or_default();
    assert!(reason.contains("paused"), "the reason when paused: {reason:?}");

    act_and_confirm(&cluster, &browser, &format!("{row} button.act[data-action=resume]"), "to running", None).await;
    let stored = rollout_json(&cluster, &id).await;
    assert_eq!(
        (&stored["action"], &stored["resumes"]),
        (&json!("run"), &json!(1)),
        "after the page's resume: {stored}"
    );
    wait_state("running", "pause").await;

    let cordon = format!(r#"th.machine[data-machine="{}"] button.act[data-action=cordon]"#, machines[1]);
    act_and_confirm(&cluster, &browser, &cordon, "takes no new unit", None).await;
    let listed =
        cluster.fleetctl(1, &["list-machines", "--full", "--no-legend", "--fields=machine,state"]).await.unwrap();
    ok(&listed, "fleetctl list-machines");
    let m2 = listed.stdout.lines().find(|l| l.starts_with(&machines[1])).unwrap_or_default().to_string();
    assert!(m2.contains("cordoned"), "m2 after the page's cordon: {}", listed.describe());
    cluster
        .wait_for("m2's column to offer uncordon", || async {
            let css =
                format!(r#"th.machine.cordoned[data-machine="{}"] button.act[data-action=uncordon]"#, machines[1]);
            match browser.find_all(Locator::Css(&css)).await {
                Ok(found) if found.len() == 1 => Check::Ready(()),
                other => Check::NotYet(format!("{:?}", other.map(|f| f.len()))),
            }
        })
        .await
        .unwrap();

    // A write from this browser without the page's token is refused, though the connection is the admin's.
    let forged = browser
        .execute_async(
            &format!(
                "var done = arguments[arguments.length - 1]; fetch('/fleet/v1/machines/{}/cordon', {{method: 'PUT'}})\
                 .then(function (r) {{ return r.text().then(function (t) {{ done(r.status + ' ' + t); }}); }});",
                machines[2]
            ),
            vec![],
        )
        .await
        .unwrap();
    assert!(
        forged.as_str().is_some_and(|t| t.starts_with("403") && t.contains("token")),
        "a write without the token: {forged}"
    );

    // The read role's page: the same panel, no action, no token.
    let read_page = forwarder(&cluster, &cluster.tls().unwrap().read).await;
    browser.goto(&read_page).await.unwrap();
    cluster
        .wait_for("the read role's page to show the rollout", || async {
            match text(&browser, &format!("{row} td.rstate .state")).await {
                Ok(state) => Check::Ready(state),
                Err(why) => Check::NotYet(why),
            }
        })
        .await
        .unwrap();
    let buttons = browser.find_all(Locator::Css("button.act")).await.unwrap();
    assert!(buttons.is_empty(), "the read role's page offers {} action(s)", buttons.len());
    assert!(
        browser.find_all(Locator::Css("meta[name=fleet-token]")).await.unwrap().is_empty(),
        "read role got a token"
    );
    browser.close().await.unwrap();
}
