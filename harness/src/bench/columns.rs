//! The bench's column tables: a label, one value per cluster size or run, and a note (the target), aligned.

use std::fmt::Write as _;

/// Left-aligned label column, right-aligned value columns, a trailing note.
pub(super) fn render(rows: &[(&str, Vec<String>, &str)]) -> String {
    let label_w = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let cols = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().filter_map(|r| r.1.get(c)).map(|v| v.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (label, values, note) in rows {
        let _ = write!(out, "  {label:<label_w$}");
        for (c, w) in widths.iter().enumerate() {
            let v = values.get(c).map_or("", String::as_str);
            let _ = write!(out, "  {v:>w$}");
        }
        if !note.is_empty() {
            let _ = write!(out, "  {note}");
        }
        out.push('\n');
    }
    out
}
