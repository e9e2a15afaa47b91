//! Table output (spec §9.5): the one tab-writer every list command and the help listing use, and the machine
//! legends shown in tables and wait messages.

use fleet_core::schema::Machine;

const TAB_WIDTH: usize = 8;
const PADDING: usize = 1;

/// Render rows the way Go's `tabwriter` (minwidth 0, tabwidth 8, padding 1, padchar TAB, no flags) renders
/// `cell\tcell\t...\tlast\n` lines: every cell but the last of a row belongs to a column; a column is as wide as its
/// widest cell plus one, rounded up to a multiple of 8; each cell is followed by enough TABs to reach the next
/// column. The last cell of a row is written as is. Widths count characters.
///
/// Columns are computed over blocks of consecutive rows that have the column (as Go does), so rows of different
/// lengths are handled like the original.
pub fn render(rows: &[Vec<String>]) -> String {
    let mut out = String::new();
    let widths = column_widths(rows);
    for (r, row) in rows.iter().enumerate() {
        for (c, cell) in row.iter().enumerate() {
            out.push_str(cell);
            if c + 1 < row.len() {
                let w = cell.chars().count();
                let col = widths[r][c];
                let tabs = (col.saturating_sub(w)).div_ceil(TAB_WIDTH).max(1);
                for _ in 0..tabs {
                    out.push('\t');
                }
            }
        }
        out.push('\n');
    }
    out
}

/// For each row and each of its column cells, the width of the column block the cell belongs to.
fn column_widths(rows: &[Vec<String>]) -> Vec<Vec<usize>> {
    let mut widths: Vec<Vec<usize>> = rows.iter().map(|r| vec![0; r.len().saturating_sub(1)]).collect();
    let max_cols = rows.iter().map(|r| r.len().saturating_sub(1)).max().unwrap_or(0);
    for c in 0..max_cols {
        let mut r = 0;
        while r < rows.len() {
            if rows[r].len().saturating_sub(1) <= c {
                r += 1;
                continue;
            }
            // A block: consecutive rows that have column c.
            let start = r;
            let mut max = 0;
            while r < rows.len() && rows[r].len().saturating_sub(1) > c {
                max = max.max(rows[r][c].chars().count() + PADDING);
                r += 1;
            }
            let width = max.div_ceil(TAB_WIDTH) * TAB_WIDTH;
            for row in widths.iter_mut().take(r).skip(start) {
                row[c] = width;
            }
        }
    }
    widths
}

/// Short or full machine ID: the first 8 characters followed by `...` (always appended), or the whole ID.
pub fn machine_id_legend(id: &str, full: bool) -> String {
    if full {
        return id.to_string();
    }
    let short: String = id.chars().take(8).collect();
    format!("{short}...")
}

/// `<legend>/<ip>` when the machine has a public IP, else just the legend.
pub fn machine_full_legend(m: &Machine, full: bool) -> String {
    let legend = machine_id_legend(&m.id, full);
    if m.primary_ip.is_empty() { legend } else { format!("{legend}/{}", m.primary_ip) }
}

/// Legend of a machine ID as shown for unit locations: with `/<ip>` when the machine is known, `-` when empty.
pub fn location_legend(machine_id: &str, machines: &[Machine], full: bool) -> String {
    if machine_id.is_empty() {
        return "-".to_string();
    }
    match machines.iter().find(|m| m.id == machine_id) {
        Some(m) => machine_full_legend(m, full),
        None => machine_id_legend(machine_id, full),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(lines: &[&[&str]]) -> Vec<Vec<String>> {
        lines.iter().map(|l| l.iter().map(|s| s.to_string()).collect()).collect()
    }

    #[test]
    fn list_machines_default_output_matches_transcript_02() {
        let out = render(&rows(&[
            &["MACHINE", "IP", "METADATA"],
            &["8363165e...", "172.17.0.2", "hostname=m1,role=a"],
            &["8606e1a2...", "172.17.0.3", "hostname=m2,role=b"],
        ]));
        assert_eq!(
            out,
            "MACHINE\t\tIP\t\tMETADATA\n8363165e...\t172.17.0.2\thostname=m1,role=a\n8606e1a2...\t172.17.0.3\thostname=m2,role=b\n"
        );
    }

    #[test]
    fn list_machines_full_output_matches_transcript_02() {
        let out = render(&rows(&[
            &["MACHINE", "IP", "METADATA"],
            &["8363165e6276f500b71169eca9b3f76b", "172.17.0.2", "hostname=m1,role=a"],
        ]));
        assert_eq!(
            out,
            "MACHINE\t\t\t\t\tIP\t\tMETADATA\n8363165e6276f500b71169eca9b3f76b\t172.17.0.2\thostname=m1,role=a\n"
        );
    }

    #[test]
    fn header_only_tables_use_one_tab() {
        assert_eq!(render(&rows(&[&["UNIT", "MACHINE", "ACTIVE", "SUB"]])), "UNIT\tMACHINE\tACTIVE\tSUB\n");
        assert_eq!(
            render(&rows(&[&["UNIT", "HASH", "DSTATE", "STATE", "TARGET"]])),
            "UNIT\tHASH\tDSTATE\tSTATE\tTARGET\n"
        );
    }

    #[test]
    fn list_units_with_mixed_widths_matches_transcript_05() {
        let out = render(&rows(&[
            &["UNIT", "MACHINE", "ACTIVE", "SUB"],
            &["global.service", "8363165e.../172.17.0.2", "inactive", "dead"],
            &["hello@1.service", "8363165e.../172.17.0.2", "active", "running"],
        ]));
        assert_eq!(
            out,
            "UNIT\t\tMACHINE\t\t\tACTIVE\t\tSUB\nglobal.service\t8363165e.../172.17.0.2\tinactive\tdead\nhello@1.service\t8363165e.../172.17.0.2\tactive\t\trunning\n"
        );
    }

    #[test]
    fn list_unit_files_with_dash_cells_matches_transcript_05() {
        let out = render(&rows(&[
            &["UNIT", "HASH", "DSTATE", "STATE", "TARGET"],
            &["global.service", "2e39e56", "launched", "-", "global"],
            &["hello@.service", "b0a4370", "inactive", "inactive", "-"],
        ]));
        assert_eq!(
            out,
            "UNIT\t\tHASH\tDSTATE\t\tSTATE\t\tTARGET\nglobal.service\t2e39e56\tlaunched\t-\t\tglobal\nhello@.service\tb0a4370\tinactive\tinactive\t-\n"
        );
    }

    #[test]
    fn seventeen_char_names_push_the_column_to_24() {
        let out =
            render(&rows(&[&["UNIT", "HASH"], &["meta-none.service", "3f2a402"], &["meta-b.service", "a376eda"]]));
        assert_eq!(out, "UNIT\t\t\tHASH\nmeta-none.service\t3f2a402\nmeta-b.service\t\ta376eda\n");
    }

    #[test]
    fn legends() {
        let m = Machine {
            id: "8363165e6276f500b71169eca9b3f76b".into(),
            primary_ip: "172.17.0.2".into(),
            ..Default::default()
        };
        assert_eq!(machine_id_legend(&m.id, false), "8363165e...");
        assert_eq!(machine_id_legend("abc", false), "abc...");
        assert_eq!(machine_full_legend(&m, false), "8363165e.../172.17.0.2");
        assert_eq!(machine_full_legend(&m, true), "8363165e6276f500b71169eca9b3f76b/172.17.0.2");
        assert_eq!(location_legend("", std::slice::from_ref(&m), false), "-");
        assert_eq!(location_legend("d91d98fca203da3cb89fb5c100ed0823", std::slice::from_ref(&m), false), "d91d98fc...");
        let no_ip = Machine { id: "x".into(), ..Default::default() };
        assert_eq!(machine_full_legend(&no_ip, true), "x");
    }
}
