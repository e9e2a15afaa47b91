//! The scale scenario's results as a Markdown table and as SVG line charts (hand-written SVG, no plotting
//! dependency), both drawn from the bench's own JSON ([`cells_from_json`]: every `runs[].scale[]` cell).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::scale::ScaleCell;

/// The cells of a bench JSON report (`fleet-harness bench --json`), in the order they appear.
pub fn cells_from_json(json: &str) -> Result<Vec<ScaleCell>, String> {
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| format!("bench JSON: {e}"))?;
    let runs = value.get("runs").and_then(|r| r.as_array()).ok_or("bench JSON: no `runs` array")?;
    let mut cells = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        let Some(scale) = run.get("scale") else { continue };
        let run_cells: Vec<ScaleCell> =
            serde_json::from_value(scale.clone()).map_err(|e| format!("bench JSON: runs[{i}].scale: {e}"))?;
        cells.extend(run_cells);
    }
    Ok(cells)
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |s| format!("{s:.2}"))
}

/// One Markdown row per cell.
pub fn table(cells: &[ScaleCell]) -> String {
    let mut s = String::new();
    s.push_str(
        "| machines | units | registered s | start cmd s | half / all active s | engine passes, mean / max ms | \
         etcd req/s, writes/s (start) | writes, keys written per unit | watch events (/s, per write, per key) | units per machine | sim RSS MiB (KiB/machine) | \
         etcd / real fleetd RSS MiB | idle: sim CPU %, etcd CPU %, etcd writes/s, req/s | 10 % leave: units moved, all active again s (TTL) |\n",
    );
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for c in cells {
        if let Some(e) = c.error.as_deref().filter(|_| c.all_active_s.is_none()) {
            let _ = writeln!(s, "| {} | {} | {e} ||||||||||||", c.machines, c.units);
            continue;
        }
        let leave = c.leave.as_ref().map_or_else(
            || "—".to_string(),
            |l| {
                format!(
                    "{} machines, {} units, {} ({} s)",
                    l.machines_left,
                    l.units_moved,
                    opt_s(l.all_active_again_s),
                    l.ttl_s
                )
            },
        );
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.2} | {} / {} | {}, {:.1} / {:.1} | {:.0}, {:.0} | {:.2}, {:.2} | {:.0} ({:.0}, {:.2}, {:.2}) | {}–{} | {:.0} ({:.0}) | {:.0} / {:.1} | {:.1}, {:.1}, {:.1}, {:.0} | {leave} |",
            c.machines,
            c.units,
            c.register_s,
            c.command_s,
            opt_s(c.half_active_s),
            opt_s(c.all_active_s),
            c.engine.passes,
            c.engine.mean_ms,
            c.engine.max_ms,
            c.start_etcd.requests_per_s,
            c.start_etcd.writes_per_s,
            c.writes_per_unit,
            c.keys_per_unit,
            c.start_etcd.watch_events,
            c.start_etcd.watch_events_per_s,
            c.start_etcd.events_per_write,
            c.start_etcd.events_per_key,
            c.placement_min,
            c.placement_max,
            c.memory.sim_rss_mib,
            c.memory.sim_rss_kib_per_machine,
            c.memory.etcd_rss_mib,
            c.memory.fleetd_rss_mib,
            c.idle_sim_cpu_pct,
            c.idle_etcd.cpu_pct,
            c.idle_etcd.writes_per_s,
            c.idle_etcd.requests_per_s,
        );
    }
    s
}

/// One line of a chart: a name and its points (x category index order follows `xs`).
pub struct Series {
    pub name: String,
    pub points: Vec<(usize, f64)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" upper bound for an axis: 1, 2 or 5 times a power of ten, at least `max`.
pub fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|v| *v >= max).unwrap_or(10.0 * power)
}

const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

/// An SVG line chart: `xs` are the category labels (evenly spaced), each series a polyline with dots.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, xs: &[usize], series: &[Series]) -> String {
    let (w, h, left, right, top, bottom) = (560.0, 320.0, 64.0, 150.0, 36.0, 48.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let max = nice_max(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max));
    let x_at = |i: usize| left + if xs.len() < 2 { pw / 2.0 } else { pw * i as f64 / (xs.len() - 1) as f64 };
    let y_at = |v: f64| top + ph - ph * v / max;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        left + pw / 2.0,
        escape(title)
    );
    for k in 0..=4 {
        let v = max * k as f64 / 4.0;
        let y = y_at(v);
        let _ = writeln!(s, r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##, left + pw);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#, left - 6.0, y + 4.0, tick(v));
    }
    for (i, x) in xs.iter().enumerate() {
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x}</text>"#, x_at(i), top + ph + 18.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 8.0,
        escape(x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="14" y="{:.1}" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"#,
        top + ph / 2.0,
        top + ph / 2.0,
        escape(y_label)
    );
    for (n, line) in series.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let points: Vec<String> = line.points.iter().map(|(i, v)| format!("{:.1},{:.1}", x_at(*i), y_at(*v))).collect();
        let _ =
            writeln!(s, r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#, points.join(" "));
        for (i, v) in &line.points {
            let _ = writeln!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#, x_at(*i), y_at(*v));
        }
        let ly = top + 16.0 * n as f64 + 8.0;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="2"/>"#,
            left + pw + 12.0,
            left + pw + 32.0
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, left + pw + 38.0, ly + 4.0, escape(&line.name));
    }
    s.push_str("</svg>\n");
    s
}

fn tick(v: f64) -> String {
    if v >= 100.0 || v == v.round() { format!("{v:.0}") } else { format!("{v:.1}") }
}

/// The charts of the scale results: (file name, SVG). Each point is the mean of the runs that measured it; a cell
/// without a result is left out of its line.
pub fn charts(cells: &[ScaleCell]) -> Vec<(String, String)> {
    let mut xs: Vec<usize> = cells.iter().map(|c| c.machines).collect();
    xs.sort_unstable();
    xs.dedup();
    let mut units: Vec<usize> = cells.iter().map(|c| c.units).collect();
    units.sort_unstable();
    units.dedup();
    let series = |value: &dyn Fn(&ScaleCell) -> Option<f64>| -> Vec<Series> {
        units
            .iter()
            .map(|u| {
                let mut per: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
                for c in cells.iter().filter(|c| c.units == *u) {
                    if let Some(v) = value(c) {
                        per.entry(c.machines).or_default().push(v);
                    }
                }
                let points = per
                    .into_iter()
                    .map(|(m, vs)| {
                        (xs.iter().position(|x| *x == m).unwrap_or(0), vs.iter().sum::<f64>() / vs.len() as f64)
                    })
                    .collect();
                Series { name: format!("{u} units"), points }
            })
            .collect()
    };
    let done = |c: &ScaleCell| c.all_active_s.is_some();
    vec![
        (
            "scale-all-active.svg".to_string(),
            line_chart(
                "start --no-block → all units active",
                "simulated machines",
                "seconds",
                &xs,
                &series(&|c| c.all_active_s),
            ),
        ),
        (
            "scale-etcd.svg".to_string(),
            line_chart(
                "etcd during the start",
                "simulated machines",
                "watch events delivered per second",
                &xs,
                &series(&|c| done(c).then_some(c.start_etcd.watch_events_per_s)),
            ),
        ),
        (
            "scale-memory.svg".to_string(),
            line_chart(
                "simulator memory",
                "simulated machines",
                "RSS per simulated machine, KiB",
                &xs,
                &series(&|c| done(c).then_some(c.memory.sim_rss_kib_per_machine)),
            ),
        ),
        (
            "scale-fleetd-memory.svg".to_string(),
            line_chart(
                "the real fleetd's memory (API and registry view, no engine)",
                "simulated machines",
                "RSS, MiB",
                &xs,
                &series(&|c| (done(c) && c.memory.fleetd_rss_mib > 0.0).then_some(c.memory.fleetd_rss_mib)),
            ),
        ),
        (
            "scale-leave.svg".to_string(),
            line_chart(
                "10 % of the machines leave at once",
                "simulated machines",
                "seconds until all active again (incl. TTL)",
                &xs,
                &series(&|c| c.leave.as_ref().and_then(|l| l.all_active_again_s)),
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench report with two cells of 1,000 units (one run) and one that timed out.
    const REPORT: &str = r#"{"machines":1,"runs":[{"run":1,"start":[],"replace":null,"rolling":[],"scale":[
      {"machines":100,"units":1000,"procs":10,"register_s":2.0,"command_s":0.5,"first_active_s":0.9,
       "half_active_s":1.5,"all_active_s":2.25,"last_active":1000,"polls":30,
       "engine":{"passes":4,"mean_ms":120.0,"max_ms":300.0,"total_ms":480.0,"applied":1000},
       "start_etcd":{"window_s":2.5,"requests_per_s":900.0,"writes_per_s":800.0,"writes":2000.0,"events_per_write":100.0,
                     "keys_written":1600.0,"events_per_key":125.0,"watch_events":200000.0,
                     "watch_events_per_s":80000.0,"lease_keepalives_per_s":30.0,"cpu_pct":95.0},
       "start_sim_cpu_pct":120.0,"writes_per_unit":2.0,"keys_per_unit":1.6,"placement_min":10,"placement_max":10,
       "idle_etcd":{"window_s":10.0,"requests_per_s":34.0,"writes_per_s":0.0,"watch_events":0.0,
                    "watch_events_per_s":0.0,"lease_keepalives_per_s":30.0,"cpu_pct":1.5},
       "idle_sim_cpu_pct":2.0,
       "memory":{"sim_rss_mib":300.0,"sim_rss_kib_per_machine":3072.0,"sim_peak_rss_mib":320.0,"etcd_rss_mib":80.0,
                 "fleetd_rss_mib":9.4},
       "leave":{"machines_left":10,"units_moved":100,"all_active_again_s":12.5,"ttl_s":10},"error":null},
      {"machines":300,"units":1000,"procs":10,"register_s":6.0,"command_s":0.5,"first_active_s":2.0,
       "half_active_s":4.0,"all_active_s":6.5,"last_active":1000,"polls":60,
       "engine":{"passes":5,"mean_ms":200.0,"max_ms":500.0,"total_ms":1000.0,"applied":1000},
       "start_etcd":{"window_s":7.0,"requests_per_s":1000.0,"writes_per_s":700.0,"watch_events":900000.0,
                     "watch_events_per_s":128571.43,"lease_keepalives_per_s":90.0,"cpu_pct":99.0},
       "start_sim_cpu_pct":150.0,"placement_min":3,"placement_max":4,
       "idle_etcd":{"window_s":10.0,"requests_per_s":100.0,"writes_per_s":0.0,"watch_events":0.0,
                    "watch_events_per_s":0.0,"lease_keepalives_per_s":90.0,"cpu_pct":3.0},
       "idle_sim_cpu_pct":5.0,
       "memory":{"sim_rss_mib":900.0,"sim_rss_kib_per_machine":3072.0,"sim_peak_rss_mib":950.0,"etcd_rss_mib":90.0},
       "leave":null,"error":null},
      {"machines":1000,"units":1000,"procs":10,"register_s":0.0,"command_s":0.0,"first_active_s":null,
       "half_active_s":null,"all_active_s":null,"last_active":0,"polls":0,
       "engine":{"passes":0,"mean_ms":0.0,"max_ms":0.0,"total_ms":0.0,"applied":0},
       "start_etcd":{"window_s":0.0,"requests_per_s":0.0,"writes_per_s":0.0,"watch_events":0.0,
                     "watch_events_per_s":0.0,"lease_keepalives_per_s":0.0,"cpu_pct":0.0},
       "start_sim_cpu_pct":0.0,"placement_min":0,"placement_max":0,
       "idle_etcd":{"window_s":0.0,"requests_per_s":0.0,"writes_per_s":0.0,"watch_events":0.0,
                    "watch_events_per_s":0.0,"lease_keepalives_per_s":0.0,"cpu_pct":0.0},
       "idle_sim_cpu_pct":0.0,
       "memory":{"sim_rss_mib":0.0,"sim_rss_kib_per_machine":0.0,"sim_peak_rss_mib":0.0,"etcd_rss_mib":0.0},
       "leave":null,"error":"412 of 1000 units active after 300s"}]}]}"#;

    #[test]
    fn the_table_has_a_row_per_cell() {
        let cells = cells_from_json(REPORT).unwrap();
        let t = table(&cells);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 5, "{t}");
        assert_eq!(
            rows[2],
            "| 100 | 1000 | 2.0 | 0.50 | 1.50 / 2.25 | 4, 120.0 / 300.0 | 900, 800 | 2.00, 1.60 | 200000 (80000, 100.00, 125.00) | 10–10 | 300 (3072) | 80 / 9.4 | 2.0, 1.5, 0.0, 34 | 10 machines, 100 units, 12.50 (10 s) |"
        );
        assert!(rows[3].ends_with("| 3–4 | 900 (3072) | 90 / 0.0 | 5.0, 3.0, 0.0, 100 | — |"), "{}", rows[3]);
        assert_eq!(rows[4], "| 1000 | 1000 | 412 of 1000 units active after 300s ||||||||||||");
    }

    #[test]
    fn charts_plot_each_measured_point() {
        let cells = cells_from_json(REPORT).unwrap();
        let charts = charts(&cells);
        let names: Vec<&str> = charts.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "scale-all-active.svg",
                "scale-etcd.svg",
                "scale-memory.svg",
                "scale-fleetd-memory.svg",
                "scale-leave.svg"
            ]
        );
        let active = &charts[0].1;
        assert!(active.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""), "{active}");
        assert!(active.ends_with("</svg>\n"));
        // y axis up to 10 s (nice bound of 6.5); x categories 100, 300, 1000 at 64, 237, 410.
        assert!(
            active.contains(
                r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="64.0,218.9 237.0,118.6"/>"##
            ),
            "{active}"
        );
        assert!(
            active.contains(">1000</text>") && active.contains(">10</text>") && active.contains(">1000 units</text>")
        );
        assert_eq!(active.matches("<circle").count(), 2, "the timed-out cell has no point");
        let fleetd = &charts[3].1;
        assert_eq!(fleetd.matches("<circle").count(), 1, "only the cell that measured its fleetd: {fleetd}");
        let leave = &charts[4].1;
        assert_eq!(leave.matches("<circle").count(), 1, "{leave}");
        assert!(line_chart("a<b", "x", "y", &[1], &[]).contains(">a&lt;b</text>"));
    }

    #[test]
    fn axes_end_at_nice_numbers() {
        assert_eq!(
            [nice_max(6.5), nice_max(0.0), nice_max(128_571.0), nice_max(3.0), nice_max(1.0)],
            [10.0, 1.0, 200_000.0, 5.0, 1.0]
        );
    }

    #[test]
    fn bad_json_is_named() {
        assert_eq!(cells_from_json("{}").unwrap_err(), "bench JSON: no `runs` array");
        assert!(
            cells_from_json("{\"runs\":[{\"scale\":[{\"machines\":\"x\"}]}]}")
                .unwrap_err()
                .starts_with("bench JSON: runs[0].scale:")
        );
    }
}
