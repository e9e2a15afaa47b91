//! The cluster page as server-rendered HTML (pure): the board table (also the page without JavaScript) and a
//! unit's detail. Everything that comes from the registry — unit names, metadata, states, unit files — goes
//! through [`escape`] or [`encode_segment`]; nothing else is interpolated.

use std::fmt::Write as _;

use super::board::{Board, Cell, Column, Detail, Recorded, RolloutRow, Row, StepRow, cell_text};
use fleet_core::model::{HealthStatus, short_hash, short_machine_id};

/// HTML-escapes text for element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes one URL path segment (everything but unreserved characters and `@`).
pub fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'@' => out.push(byte as char),
            other => {
                let _ = write!(out, "%{other:02X}");
            }
        }
    }
    out
}

/// The CSS class of a systemd active state (a fixed set, so no registry text reaches a class name).
pub fn state_class(active: &str) -> &'static str {
    match active {
        "active" => "s-active",
        "activating" | "reloading" => "s-activating",
        "deactivating" => "s-deactivating",
        "failed" => "s-failed",
        "inactive" => "s-inactive",
        "scheduled" => "s-scheduled",
        _ => "s-other",
    }
}

/// The CSS class of a health status (a fixed set, as [`state_class`]).
pub fn health_class(status: HealthStatus) -> &'static str {
    match status {
        HealthStatus::Healthy => "h-healthy",
        HealthStatus::Unhealthy => "h-unhealthy",
        HealthStatus::Unknown => "h-unknown",
    }
}

/// How the page is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// With the script that keeps it live.
    Live,
    /// The plain table, no script.
    Plain,
}

/// The whole page: header, board table, rollouts panel, detail panel, and in [`Mode::Live`] the script. `token`
/// is the admin role's action token ([`crate::api::csrf::Csrf::token`]): with it the live page offers the actions
/// (each asks for confirmation with a preview); without it (read role, no roles, the plain table) it offers none.
pub fn page(board: &Board, mode: Mode, token: Option<&str>) -> String {
    let token = token.filter(|_| mode == Mode::Live);
    let mut out = String::new();
    head(&mut out, "fleet cluster", "");
    if let Some(token) = token {
        // Read by the script for its writes' token header; the script renders actions only when it is there.
        let _ = writeln!(out, "<meta name=\"fleet-token\" content=\"{}\">", escape(token));
    }
    let status = match mode {
        Mode::Live => "connecting…",
        Mode::Plain => "static view (reload to refresh)",
    };
    let _ = write!(
        out,
        "<header><h1>fleet</h1><span id=\"status\" class=\"status\">{status}</span>\
         <span id=\"revision\" class=\"revision\">revision {}</span>\
         <nav><a href=\"./\">live page</a> · <a href=\"./?plain\">plain table</a></nav></header>\n<main>\n",
        board.revision
    );
    out.push_str("<div class=\"panels\">\n");
    table(&mut out, board, token.is_some());
    rollouts(&mut out, &board.rollouts, token.is_some());
    out.push_str("</div>\n<aside id=\"detail\" class=\"detail\" hidden></aside>\n</main>\n");
    if token.is_some() {
        // Filled by the script with the preview of the action asked for; nothing is done before "confirm".
        out.push_str(
            "<dialog id=\"confirm\" class=\"confirm\"><h2 id=\"confirm-title\"></h2><ul id=\"confirm-summary\"></ul>\
             <table id=\"confirm-changes\" class=\"changes\"></table><p id=\"confirm-error\" class=\"error\"></p>\
             <div class=\"buttons\"><button type=\"button\" id=\"confirm-cancel\">cancel</button>\
             <button type=\"button\" id=\"confirm-ok\" class=\"primary\">confirm</button></div></dialog>\n",
        );
    }
    if mode == Mode::Live {
        out.push_str(
            "<noscript><p class=\"note\">Without JavaScript this table does not update; \
             <a href=\"./?plain\">the plain table</a> shows the cluster at each reload.</p></noscript>\n\
             <script src=\"app.js\"></script>\n",
        );
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn head(out: &mut String, title: &str, base: &str) {
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n\
         <link rel=\"stylesheet\" href=\"{base}style.css\">\n</head>\n<body>\n",
        escape(title)
    );
}

/// The board table: one column per machine (ID, address, metadata), one row per unit.
fn table(out: &mut String, board: &Board, actions: bool) {
    out.push_str("<table id=\"board\" class=\"board\">\n<thead><tr><th>unit</th><th>desired</th><th>current</th>");
    for column in &board.machines {
        machine_header(out, column, actions);
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &board.rows {
        unit_row(out, row, &board.machines);
    }
    out.push_str("</tbody>\n</table>\n");
    if board.rows.is_empty() {
        out.push_str("<p id=\"empty\" class=\"note\">No units.</p>\n");
    }
}

/// An action button: `action` from a fixed set, `subject` (a machine ID, rollout ID or unit name) escaped.
fn button(out: &mut String, action: &str, subject: &str) {
    let _ = write!(
        out,
        "<button type=\"button\" class=\"act\" data-action=\"{action}\" data-subject=\"{}\">{}</button>",
        escape(subject),
        action_label(action)
    );
}

/// What a button says (the same fixed mapping as the script's `actionLabel`).
fn action_label(action: &str) -> &'static str {
    match action {
        "pause" => "pause",
        "resume" => "resume",
        "abort" => "abort",
        "promote" => "promote",
        "rollback" => "roll back",
        "cordon" => "cordon",
        "uncordon" => "uncordon",
        "drain" => "drain",
        _ => "?",
    }
}

/// The rollouts panel: one row per rollout (ID, kind, units, state, reason, steps, and for the admin role the
/// actions it takes now).
fn rollouts(out: &mut String, rollouts: &[RolloutRow], actions: bool) {
    out.push_str("<section class=\"rollouts\"><h2>rollouts</h2>\n<table id=\"rollouts\" class=\"rollouts\">\n");
    out.push_str("<thead><tr><th>rollout</th><th>kind</th><th>units</th><th>state</th><th>steps</th>");
    if actions {
        out.push_str("<th>actions</th>");
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for r in rollouts {
        rollout_row(out, r, actions);
    }
    out.push_str("</tbody>\n</table>\n");
    if rollouts.is_empty() {
        out.push_str("<p id=\"no-rollouts\" class=\"note\">No rollouts.</p>\n");
    }
    out.push_str("</section>\n");
}

/// The CSS class of a rollout state (a fixed set, as [`state_class`]).
pub fn rollout_class(state: &str) -> &'static str {
    match state {
        "running" => "r-running",
        "paused" => "r-paused",
        "done" => "r-done",
        "aborted" | "rolled_back" => "r-ended",
        _ => "r-other",
    }
}

fn rollout_row(out: &mut String, r: &RolloutRow, actions: bool) {
    let _ = write!(
        out,
        "<tr data-rollout=\"{}\"><td class=\"id\">{}</td><td class=\"kind\">{}</td><td class=\"units\">{}</td>\
         <td class=\"rstate {}\"><span class=\"state\">{}</span>",
        escape(&r.id),
        escape(&r.id),
        escape(&r.kind),
        escape(&r.units.join(" ")),
        rollout_class(&r.state),
        escape(&r.state)
    );
    for why in [&r.reason, &r.error].into_iter().filter(|w| !w.is_empty()) {
        let _ = write!(out, "<div class=\"reason\">{}</div>", escape(why));
    }
    out.push_str("</td><td>");
    steps(out, &r.steps, "");
    steps(out, &r.undo, "undo");
    out.push_str("</td>");
    if actions {
        out.push_str("<td class=\"actions\">");
        for action in &r.actions {
            let subject = if *action == "rollback" { r.units.first().map_or("", String::as_str) } else { &r.id };
            button(out, action, subject);
        }
        out.push_str("</td>");
    }
    out.push_str("</tr>\n");
}

/// A rollout's steps as a small table: machine (a move: from → to), unit, phase, health, detail.
fn steps(out: &mut String, steps: &[StepRow], caption: &str) {
    if steps.is_empty() {
        return;
    }
    out.push_str("<table class=\"steps\">");
    if !caption.is_empty() {
        let _ = write!(out, "<caption>{caption}</caption>");
    }
    for s in steps {
        let place = if s.from.is_empty() {
            short_machine_id(&s.machine).to_string()
        } else {
            format!("{} → {}", short_machine_id(&s.from), short_machine_id(&s.machine))
        };
        let _ = write!(
            out,
            "<tr data-machine=\"{}\"><td class=\"mid\" title=\"{}\">{}</td><td>{}</td><td class=\"phase p-{}\">{}</td><td>",
            escape(&s.machine),
            escape(&s.machine),
            escape(&place),
            escape(&s.unit),
            phase_class(&s.phase),
            escape(&s.phase)
        );
        if let Some(h) = &s.health {
            let _ = write!(out, "<span class=\"health {}\">{}</span>", health_class(h.status), h.status);
        }
        let _ = write!(out, "</td><td class=\"detail\">{}</td></tr>", escape(&s.detail));
    }
    out.push_str("</table>");
}

/// A step phase as a class suffix (a fixed set).
fn phase_class(phase: &str) -> &'static str {
    match phase {
        "pending" => "pending",
        "updating" => "updating",
        "healthy" => "healthy",
        "done" => "done",
        "failed" => "failed",
        "skipped" => "skipped",
        _ => "other",
    }
}

/// A machine's column header; a cordoned machine's has the class `cordoned` and a badge saying so (issue 38); for
/// the admin role, the cordon or uncordon action and the drain.
fn machine_header(out: &mut String, column: &Column, actions: bool) {
    let _ = write!(
        out,
        "<th class=\"machine{}\" data-machine=\"{}\" title=\"{}{}\"><div class=\"mid\">{}</div><div class=\"ip\">{}</div>",
        if column.cordoned { " cordoned" } else { "" },
        escape(&column.id),
        escape(&column.id),
        if column.cordoned { " (cordoned: takes no new unit)" } else { "" },
        escape(&column.short),
        escape(&column.ip)
    );
    if column.cordoned {
        out.push_str("<div class=\"badge\">cordoned</div>");
    }
    for (key, value) in &column.metadata {
        let _ = write!(out, "<div class=\"meta\">{}={}</div>", escape(key), escape(value));
    }
    if actions {
        out.push_str("<div class=\"actions\">");
        button(out, if column.cordoned { "uncordon" } else { "cordon" }, &column.id);
        button(out, "drain", &column.id);
        out.push_str("</div>");
    }
    out.push_str("</th>");
}

fn unit_row(out: &mut String, row: &Row, machines: &[Column]) {
    let _ = write!(
        out,
        "<tr data-unit=\"{}\"><th><a class=\"unit\" href=\"units/{}\">{}</a></th><td class=\"desired\">{}</td>\
         <td class=\"current\">{}</td>",
        escape(&row.name),
        encode_segment(&row.name),
        escape(&row.name),
        escape(&row.desired),
        escape(&row.current)
    );
    for column in machines {
        match row.cells.get(&column.id) {
            Some(cell) => cell_td(out, &column.id, cell),
            None => {
                let _ = write!(out, "<td class=\"cell\" data-machine=\"{}\"></td>", escape(&column.id));
            }
        }
    }
    out.push_str("</tr>\n");
}

fn cell_td(out: &mut String, machine: &str, cell: &Cell) {
    // Behind the version it should run (a machine a rollout has not reached yet is not behind).
    let outdated = !cell.hash.is_empty() && cell.hash != cell.intended;
    let _ = write!(
        out,
        "<td class=\"cell {}{}{}\" data-machine=\"{}\" title=\"{}\">{}",
        state_class(&cell.active),
        if cell.target { " target" } else { "" },
        if outdated { " outdated" } else { "" },
        escape(machine),
        escape(&cell_title(cell)),
        escape(&cell_text(cell))
    );
    if let Some(health) = &cell.health {
        let _ = write!(out, " <span class=\"health {}\">{}</span>", health_class(health.status), health.status);
    }
    out.push_str("</td>");
}

fn cell_title(cell: &Cell) -> String {
    let mut title = format!("load {}", if cell.load.is_empty() { "-" } else { &cell.load });
    if !cell.hash.is_empty() {
        let _ = write!(title, ", file {}", short_hash(&cell.hash));
    }
    if !cell.running.is_empty() {
        let _ = write!(title, ", running {}", short_hash(&cell.running));
    }
    if let Some(health) = &cell.health {
        let _ = write!(title, ", health {}", health.status);
        if !health.output.is_empty() {
            let _ = write!(title, ": {}", health.output);
        }
    }
    title
}

/// A unit's detail: as a fragment for the live page's panel, or as a page of its own (no JavaScript needed).
pub fn detail(detail: &Detail, history: &[Recorded], machines: &[Column], fragment: bool) -> String {
    let mut out = String::new();
    if !fragment {
        head(&mut out, &detail.row.name, "../");
        out.push_str("<header><h1>fleet</h1><nav><a href=\"../\">live page</a> · <a href=\"../?plain\">plain table</a></nav></header>\n<main>\n<section class=\"detail\">\n");
    }
    let row = &detail.row;
    let _ = write!(
        out,
        "<h2 id=\"detail-name\">{}</h2>\n<dl>\n<dt>desired state</dt><dd id=\"detail-desired\">{}</dd>\n\
         <dt>current state</dt><dd id=\"detail-current\">{}</dd>\n<dt>scheduled to</dt><dd>{}</dd>\n\
         <dt>desired version</dt><dd><code id=\"detail-hash\">{}</code></dd>\n",
        escape(&row.name),
        escape(&row.desired),
        escape(&row.current),
        escape(row.target.as_deref().unwrap_or("-")),
        escape(&row.hash)
    );
    if let Some(previous) = &detail.previous_hash {
        let _ = writeln!(out, "<dt>previous version</dt><dd><code>{}</code></dd>", escape(previous));
    }
    // A health column only for a unit with a check somewhere: other units' detail stays as it was.
    let checked = row.cells.values().any(|c| c.health.is_some());
    let _ = write!(
        out,
        "</dl>\n<h3>versions by machine</h3>\n<table class=\"versions\"><thead><tr><th>machine</th><th>state</th>{}<th>file on the machine</th><th>running</th><th></th></tr></thead><tbody>\n",
        if checked { "<th>health</th>" } else { "" }
    );
    for (machine, cell) in &row.cells {
        let name = machines.iter().find(|c| &c.id == machine).map_or(machine.as_str(), |c| c.short.as_str());
        let verdict = if cell.hash.is_empty() {
            "not yet loaded"
        } else if cell.hash != cell.intended || !(cell.running.is_empty() || cell.running == cell.intended) {
            "differs from the version it should run"
        } else if cell.intended == row.hash {
            "desired version"
        } else {
            "kept on its version by a rollout until its step"
        };
        let health = match &cell.health {
            None if !checked => String::new(),
            None => "<td>-</td>".to_string(),
            Some(h) => format!(
                "<td class=\"{}\">{}{}</td>",
                health_class(h.status),
                h.status,
                if h.output.is_empty() { String::new() } else { format!(": {}", escape(&h.output)) }
            ),
        };
        let _ = writeln!(
            out,
            "<tr data-machine=\"{}\"><td title=\"{}\">{}</td><td class=\"{}\">{}</td>{health}<td><code>{}</code></td><td><code>{}</code></td><td>{}</td></tr>",
            escape(machine),
            escape(machine),
            escape(name),
            state_class(&cell.active),
            escape(&cell_text(cell)),
            escape(&cell.hash),
            escape(&cell.running),
            verdict
        );
    }
    out.push_str("</tbody></table>\n<h3>recent changes</h3>\n<ol id=\"detail-history\" class=\"history\" reversed>\n");
    for recorded in history.iter().rev() {
        let at = clock(recorded.at_ms);
        let place = recorded
            .change
            .machine
            .as_deref()
            .map(|m| machines.iter().find(|c| c.id == m).map_or(m.to_string(), |c| c.short.clone()));
        let _ = writeln!(
            out,
            "<li><time>{at}</time> {}{}</li>",
            place.map(|p| format!("<span class=\"on\">{}</span> ", escape(&p))).unwrap_or_default(),
            escape(&recorded.change.change)
        );
    }
    if history.is_empty() {
        out.push_str("<li class=\"note\">none seen by this fleetd since it started</li>\n");
    }
    let _ = write!(out, "</ol>\n<h3>unit file</h3>\n<pre class=\"file\">{}</pre>\n", escape(&detail.body));
    if !fragment {
        out.push_str("</section>\n</main>\n</body>\n</html>\n");
    }
    out
}

/// `HH:MM:SS` (UTC) of a Unix time in milliseconds.
fn clock(at_ms: u64) -> String {
    let day_secs = (at_ms / 1000) % 86_400;
    format!("{:02}:{:02}:{:02}", day_secs / 3600, (day_secs / 60) % 60, day_secs % 60)
}

#[cfg(test)]
mod tests {
    use super::super::board::tests::{H1, H2, M1, M2, Registry};
    use super::super::board::{StateChange, board, detail as detail_of};
    use super::*;

    #[test]
    fn escapes_markup_quotes_and_ampersands() {
        assert_eq!(escape(r#"<a href="x">'&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(encode_segment("a b/c?d@e.service"), "a%20b%2Fc%3Fd@e.service");
    }

    #[test]
    fn registry_text_is_escaped_everywhere_it_is_rendered() {
        let hostile = "<script>alert(1)</script>";
        let mut r = Registry::new();
        r.machine(M1, r#"10.0.0.1\"><b>"#, &format!(r#"{{"role":"{hostile}"}}"#));
        r.unit("x.service", H1, "launched").target("x.service", M1);
        r.state("x.service", M1, H1, "active", "<img src=x onerror=alert(2)>");
        let snapshot = r.now();
        let html = page(&board(&snapshot), Mode::Live, None);
        assert!(!html.contains("<script>alert") && !html.contains("<img") && !html.contains("\"><b>"), "{html}");
        assert!(html.contains("role=&lt;script&gt;alert(1)&lt;/script&gt;"), "{html}");
        assert!(html.contains("10.0.0.1&quot;&gt;&lt;b&gt;"), "{html}");
        let d = detail_of(&snapshot, "x.service").unwrap();
        let history = [Recorded {
            at_ms: 0,
            change: StateChange { unit: "x.service".into(), machine: None, change: hostile.into() },
        }];
        let fragment = detail(&d, &history, &board(&snapshot).machines, true);
        assert!(!fragment.contains("<script>") && !fragment.contains("<img"), "{fragment}");
    }

    /// Issue 38: a cordoned machine's column says so, in the page without script too; the others are as before.
    #[test]
    fn a_cordoned_machine_has_a_badge_in_its_column_header() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}").machine(M2, "10.0.0.2", "{}").cordon(M2);
        let b = board(&r.now());
        assert_eq!(b.machines.iter().map(|c| c.cordoned).collect::<Vec<_>>(), [false, true]);
        let plain = page(&b, Mode::Plain, None);
        assert!(plain.contains(&format!("<th class=\"machine\" data-machine=\"{M1}\" title=\"{M1}\">")), "{plain}");
        assert!(
            plain.contains(&format!(
                "<th class=\"machine cordoned\" data-machine=\"{M2}\" title=\"{M2} (cordoned: takes no new unit)\">"
            )),
            "{plain}"
        );
        assert_eq!(plain.matches("<div class=\"badge\">cordoned</div>").count(), 1, "{plain}");
    }

    #[test]
    fn plain_page_has_the_table_and_no_script() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", r#"{"region":"eu"}"#);
        r.unit("web.service", H1, "launched").target("web.service", M1).state(
            "web.service",
            M1,
            H1,
            "active",
            "running",
        );
        let b = board(&r.now());
        let plain = page(&b, Mode::Plain, None);
        assert!(!plain.contains("<script"), "{plain}");
        assert!(plain.contains("<tr data-unit=\"web.service\">"), "{plain}");
        assert!(plain.contains("class=\"cell s-active target\""), "{plain}");
        assert!(plain.contains(">active/running</td>"), "{plain}");
        assert!(plain.contains("<div class=\"meta\">region=eu</div>"), "{plain}");
        assert!(page(&b, Mode::Live, None).contains("<script src=\"app.js\"></script>"));
    }

    #[test]
    fn a_checked_units_cell_shows_its_health_and_a_plain_cell_is_unchanged() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}");
        r.unit("web.service", H1, "launched").target("web.service", M1);
        r.state_with_health("web.service", M1, H1, "unhealthy", "<b>refused</b>");
        r.unit("plain.service", H1, "launched").target("plain.service", M1).state(
            "plain.service",
            M1,
            H1,
            "active",
            "running",
        );
        let snapshot = r.now();
        let html = page(&board(&snapshot), Mode::Plain, None);
        assert!(html.contains(">active/running <span class=\"health h-unhealthy\">unhealthy</span></td>"), "{html}");
        assert!(html.contains("health unhealthy: &lt;b&gt;refused&lt;/b&gt;"), "output escaped in the title: {html}");
        let plain = html.lines().find(|l| l.starts_with("<tr data-unit=\"plain.service\">")).unwrap();
        assert!(plain.contains(">active/running</td>") && !plain.contains("health"), "{plain}");
        let fragment = detail(&detail_of(&snapshot, "web.service").unwrap(), &[], &board(&snapshot).machines, true);
        assert!(
            fragment.contains("<td class=\"h-unhealthy\">unhealthy: &lt;b&gt;refused&lt;/b&gt;</td>"),
            "{fragment}"
        );
        let plain = detail(&detail_of(&snapshot, "plain.service").unwrap(), &[], &board(&snapshot).machines, true);
        assert!(!plain.contains("<th>health</th>"), "no health column without a check: {plain}");
    }

    #[test]
    fn a_machine_a_rollout_has_not_reached_yet_is_kept_on_its_version_not_outdated() {
        use fleet_core::rollout::{Phase, RolloutProgress, RolloutState, Step};
        use fleet_registry::Key;
        let mut reg = Registry::new();
        reg.machine(M1, "10.0.0.1", "{}").machine(M2, "10.0.0.2", "{}").unit("db.service", H2, "launched");
        reg.put(Key::Body { hash: H1.into() }, "[Service]\nExecStart=/bin/true # old\n");
        reg.state("db.service", M1, H2, "active", "running").state("db.service", M2, H1, "active", "running");
        let step = |machine: &str, phase| Step {
            unit: "db.service".into(),
            machine: machine.into(),
            phase,
            ..Step::default()
        };
        let progress = RolloutProgress {
            state: RolloutState::Running,
            steps: vec![step(M1, Phase::Done), step(M2, Phase::Pending)],
            ..RolloutProgress::default()
        };
        reg.replace_rollout("r1", "db.service", &progress);
        let row = super::super::board::row(&reg.snap, "db.service").unwrap();
        assert_eq!(row.cells[M2].intended, H1, "m2 keeps the old version until its step");
        assert_eq!(row.cells[M1].intended, H2);
        let mut out = String::new();
        for machine in [M1, M2] {
            cell_td(&mut out, machine, &row.cells[machine]);
        }
        assert!(!out.contains("outdated"), "a machine the rollout has not reached is not behind: {out}");
        // Once its step is released, the machine should run the new version: the old one is behind.
        let progress = RolloutProgress {
            state: RolloutState::Running,
            steps: vec![step(M1, Phase::Done), step(M2, Phase::Updating)],
            ..RolloutProgress::default()
        };
        reg.replace_rollout("r1", "db.service", &progress);
        let row = super::super::board::row(&reg.snap, "db.service").unwrap();
        let mut out = String::new();
        cell_td(&mut out, M2, &row.cells[M2]);
        assert!(out.contains(" outdated"), "released, m2 still holds the old version: {out}");
    }

    #[test]
    fn detail_shows_file_hash_versions_and_history_newest_first() {
        let mut r = Registry::new();
        r.machine(M1, "10.0.0.1", "{}");
        r.unit("web.service", H1, "launched").target("web.service", M1).state(
            "web.service",
            M1,
            H1,
            "active",
            "running",
        );
        r.launched("web.service", M1, H1);
        let snapshot = r.now();
        let d = detail_of(&snapshot, "web.service").unwrap();
        let seen = |at_ms, change: &str| Recorded {
            at_ms,
            change: StateChange { unit: "web.service".into(), machine: Some(M1.into()), change: change.into() },
        };
        let html = detail(&d, &[seen(1_000, "first"), seen(2_000, "second")], &board(&snapshot).machines, false);
        assert!(html.contains(H1) && html.contains("ExecStart=/bin/true"), "{html}");
        assert!(html.contains("desired version</td>"), "{html}");
        assert!(html.find("second").unwrap() < html.find("first").unwrap(), "{html}");
        assert!(html.contains("<time>00:00:02</time> <span class=\"on\">aaaaaaaa</span> second"), "{html}");
    }

    /// Issue 38: the live page offers actions only with the admin's token; the read role, no roles and the plain
    /// table get the same panel without a button, token or dialog.
    #[test]
    fn actions_are_rendered_for_the_admin_role_only_and_registry_text_stays_escaped() {
        use fleet_core::rollout::{Phase, RolloutProgress, RolloutState, Step};
        let mut reg = Registry::new();
        reg.machine(M1, "10.0.0.1", "{}").machine(M2, "10.0.0.2", "{}").cordon(M2);
        reg.unit("db.service", H2, "launched");
        let step = Step { detail: "<b>failed</b>".into(), ..Step::pending("db.service", M1) };
        let progress = RolloutProgress {
            state: RolloutState::Paused,
            reason: "paused: <i>check</i>".into(),
            steps: vec![Step { phase: Phase::Failed, ..step }],
            ..RolloutProgress::default()
        };
        reg.replace_rollout("r1", "db.service", &progress);
        let b = board(&reg.now());
        let admin = page(&b, Mode::Live, Some("t0k"));
        assert!(admin.contains("<meta name=\"fleet-token\" content=\"t0k\">"), "{admin}");
        assert!(admin.contains("<dialog id=\"confirm\""), "{admin}");
        let act = |action: &str, subject: &str| {
            format!("<button type=\"button\" class=\"act\" data-action=\"{action}\" data-subject=\"{subject}\">")
        };
        for (action, subject) in
            [("resume", "r1"), ("abort", "r1"), ("cordon", M1), ("uncordon", M2), ("drain", M1), ("drain", M2)]
        {
            assert!(admin.contains(&act(action, subject)), "admin page lacks {action} {subject}: {admin}");
        }
        assert!(!admin.contains(&act("pause", "r1")), "a paused rollout is not paused again");
        assert!(
            admin.contains("paused: &lt;i&gt;check&lt;/i&gt;") && admin.contains("&lt;b&gt;failed&lt;/b&gt;"),
            "{admin}"
        );
        assert!(admin.contains("<td class=\"phase p-failed\">failed</td>"), "{admin}");
        for (what, html) in
            [("read role / no roles", page(&b, Mode::Live, None)), ("plain table", page(&b, Mode::Plain, Some("t0k")))]
        {
            assert!(html.contains("<tr data-rollout=\"r1\">"), "{what}: the panel is shown: {html}");
            assert!(
                !html.contains("class=\"act\"") && !html.contains("fleet-token") && !html.contains("<dialog"),
                "{what}: {html}"
            );
        }
    }
}
