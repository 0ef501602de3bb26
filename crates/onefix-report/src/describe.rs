//! Small shared wordings of numbers and of the target, so that every writer rounds and names
//! things the same way.

pub use onefix_model::fmt::signal_name;
pub(crate) use onefix_model::fmt::{bytes, exit_clause};
use onefix_model::{Meta, Target};

/// Rounds to a fixed number of decimals, so reports don't print float noise
/// (`0.30000000000000004`) and stay byte-stable across platforms.
pub(crate) fn round_to(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

/// The onefix version a report names: the one that made the recording, or this build when the
/// recording does not say (hand-built profiles).
pub(crate) fn tool_version(meta: &Meta) -> &str {
    if meta.tool_version.is_empty() {
        env!("CARGO_PKG_VERSION")
    } else {
        &meta.tool_version
    }
}

/// `1234567` → `1,234,567`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        // Not is_multiple_of: the workspace promises Rust 1.80.
        #[allow(clippy::manual_is_multiple_of)]
        let group_starts = (digits.len() - i) % 3 == 0;
        if i > 0 && group_starts {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A share as a whole percentage (`86%`); a share too small to show as 1% says so instead of
/// printing a misleading `0%`.
pub(crate) fn percent(share: f64) -> String {
    let pct = share * 100.0;
    if pct > 0.0 && pct < 0.5 {
        "<1%".to_owned()
    } else {
        format!("{pct:.0}%")
    }
}

/// A share with one decimal (`86.0%`), for tables where small differences matter.
pub(crate) fn percent_tenths(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

pub(crate) fn seconds(duration_s: f64) -> String {
    if duration_s >= 10.0 {
        format!("{duration_s:.1} s")
    } else {
        format!("{duration_s:.2} s")
    }
}

pub(crate) fn hertz(rate_hz: f64) -> String {
    if rate_hz.fract() == 0.0 {
        format!("{rate_hz:.0} Hz")
    } else {
        format!("{rate_hz:.1} Hz")
    }
}

/// The command line as a shell would take it back, or `pid N` when onefix attached.
pub(crate) fn command_line(target: &Target) -> String {
    match &target.argv {
        // Shown on terminals and in reports: the target's control characters are shown escaped.
        Some(argv) if !argv.is_empty() => {
            let line = argv.iter().map(|arg| shell_quote(arg)).collect::<Vec<_>>().join(" ");
            onefix_model::fmt::escape_controls(&line).into_owned()
        }
        _ => format!("pid {}", target.pid),
    }
}

fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// A source path as the user would type it: relative to the target's working directory when
/// it lies beneath it, as the target saw it otherwise.
pub(crate) fn display_path<'a>(file: &'a str, cwd: Option<&str>) -> &'a str {
    let under_cwd = cwd.filter(|c| !c.is_empty()).and_then(|cwd| {
        file.strip_prefix(cwd)
            .and_then(|rest| rest.strip_prefix('/').or(cwd.ends_with('/').then_some(rest)))
            .filter(|rest| !rest.is_empty())
    });
    under_cwd.or_else(|| within_package_tree(file)).unwrap_or(file)
}

/// An installed package's file from its package on (`jsonschema/validators.py`, a crate's
/// `toml-0.5.3/src/de.rs`): the maintainer's view shows where in the package, not the venv.
fn within_package_tree(file: &str) -> Option<&str> {
    for marker in ["/site-packages/", "/dist-packages/", "/go/pkg/mod/"] {
        if let Some(i) = file.rfind(marker) {
            return Some(&file[i + marker.len()..]);
        }
    }
    // `~/.cargo/registry/src/index.crates.io-…/toml-0.5.3/src/de.rs`: after the index's folder.
    let i = file.find("/.cargo/registry/src/")?;
    let rest = &file[i + "/.cargo/registry/src/".len()..];
    rest.split_once('/').map(|(_, crate_path)| crate_path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installed_package_is_shown_from_the_package_on() {
        assert_eq!(
            display_path("/v/lib/python3.11/site-packages/jsonschema/validators.py", Some("/src")),
            "jsonschema/validators.py"
        );
        assert_eq!(display_path("/src/app/main.py", Some("/src")), "app/main.py");
        assert_eq!(
            display_path("/root/.cargo/registry/src/index.crates.io-6f17/toml-0.5.3/src/de.rs", None),
            "toml-0.5.3/src/de.rs"
        );
        assert_eq!(display_path("/opt/tool.py", Some("/src")), "/opt/tool.py");
    }

    #[test]
    fn thousands_groups_by_three() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn rounding_removes_float_noise() {
        assert_eq!(round_to(0.1 + 0.2, 4), 0.3);
        assert_eq!(round_to(0.86123, 4), 0.8612);
        assert_eq!(round_to(7.1428, 2), 7.14);
    }

    #[test]
    fn percents_never_print_a_misleading_zero() {
        assert_eq!(percent(0.86), "86%");
        assert_eq!(percent(0.001), "<1%");
        assert_eq!(percent(0.0), "0%");
        assert_eq!(percent_tenths(0.8612), "86.1%");
    }

    #[test]
    fn paths_under_the_working_directory_are_shortened() {
        assert_eq!(display_path("/srv/app/updater.py", Some("/srv/app")), "updater.py");
        assert_eq!(display_path("/srv/app/updater.py", Some("/srv/app/")), "updater.py");
        assert_eq!(display_path("/srv/application.py", Some("/srv/app")), "/srv/application.py");
        assert_eq!(display_path("/usr/lib/x.py", Some("/srv/app")), "/usr/lib/x.py");
        assert_eq!(display_path("updater.py", None), "updater.py");
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let target = Target {
            argv: Some(vec!["python3".into(), "app.py".into(), "--name".into(), "a b".into(), "it's".into()]),
            ..Target::default()
        };
        assert_eq!(command_line(&target), r"python3 app.py --name 'a b' 'it'\''s'");
        assert_eq!(command_line(&Target { pid: 7, ..Target::default() }), "pid 7");
        let titled = Target { argv: Some(vec!["python3".into(), "\x1b]0;pwn\x07".into()]), ..Target::default() };
        assert_eq!(command_line(&titled), r"python3 '\x1b]0;pwn\x07'");
    }

    #[test]
    fn sizes_and_rates_read_naturally() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(45_600_000), "45.6 MB");
        assert_eq!(hertz(100.0), "100 Hz");
        assert_eq!(hertz(99.5), "99.5 Hz");
        assert_eq!(seconds(12.34), "12.3 s");
        assert_eq!(seconds(2.346), "2.35 s");
    }
}
