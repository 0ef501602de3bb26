//! What an installed onefix gives its users beyond profiling (issue 8): `--version`, `--help`
//! for every command, and shell completions and man pages generated from the same command-line
//! definition (`onefix generate`, for packagers).

use std::process::{Command, Output, Stdio};

fn onefix(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_onefix")).args(args).output().unwrap();
    assert!(out.status.success(), "onefix {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(onefix(args).stdout).unwrap()
}

const COMMANDS: &[&str] = &["record", "report", "load", "compare", "top", "dump", "generate"];

#[test]
fn version_names_the_package_version() {
    assert_eq!(stdout(&["--version"]).trim(), format!("onefix {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn help_lists_every_command_and_each_command_has_its_own() {
    let help = stdout(&["--help"]);
    for c in COMMANDS {
        assert!(help.contains(c), "{c} missing from --help:\n{help}");
    }
    for (c, option) in [("record", "--pid"), ("report", "--json"), ("load", "--rate"), ("compare", "--json")] {
        let sub = stdout(&[c, "--help"]);
        assert!(sub.contains(option), "{c} --help lacks {option}:\n{sub}");
    }
    // load's long help carries the template syntax.
    assert!(stdout(&["load", "--help"]).contains("{{int A B}}"));
    // `report` prints no progress line: it documents no option to quiet one.
    assert!(!stdout(&["report", "--help"]).contains("progress"));
}

/// The example in `load --help` pastes into a shell as printed, at a narrow terminal too: run
/// through bash with `onefix` standing for a function that prints its arguments, its URL
/// arrives whole, and onefix takes it as a valid template (it fails only on the closed port).
#[test]
fn the_load_help_example_pastes_into_a_shell() {
    for columns in ["80", "200"] {
        let out = Command::new(env!("CARGO_BIN_EXE_onefix")).args(["load", "--help"]).env("COLUMNS", columns).output();
        let help = String::from_utf8(out.unwrap().stdout).unwrap();
        let example: Vec<&str> = help.lines().skip_while(|l| !l.starts_with("Example")).skip(1).collect();
        let example: Vec<&str> = example.into_iter().skip_while(|l| !l.starts_with("  ")).collect();
        assert!(example.len() >= 2, "no example in load --help:\n{help}");
        let script = format!("onefix() {{ printf '%s\\n' \"$@\"; }}\n{}", example.join("\n"));
        let run = Command::new("bash").arg("-c").arg(&script).output().unwrap();
        assert!(run.status.success(), "{script}\n{}", String::from_utf8_lossy(&run.stderr));
        let printed = String::from_utf8(run.stdout).unwrap();
        let url = printed.lines().last().unwrap();
        assert!(url.starts_with("http://127.0.0.1:6969/announce?") && url.ends_with("&compact=1"), "{url}");
        assert_eq!(url.matches("{{").count(), 4, "{url}");
        let closed = url.replace("127.0.0.1:6969", "127.0.0.1:9");
        let load = Command::new(env!("CARGO_BIN_EXE_onefix")).args(["load", &closed, "-n", "1"]).output().unwrap();
        let err = String::from_utf8_lossy(&load.stderr);
        assert!(err.contains("nothing is listening at 127.0.0.1:9"), "the template was refused: {err}");
    }
}

#[test]
fn completions_cover_every_command_and_bash_parses_them() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout(&["generate", "completions", shell]);
        // Options by name: fish writes `-l flamegraph`, the others `--flamegraph`.
        for word in COMMANDS.iter().chain(&["pid", "flamegraph", "duration", "subprocesses"]) {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    // The bash script is valid bash (bash -n parses without running).
    let script = stdout(&["generate", "completions", "bash"]);
    let mut bash = Command::new("bash").arg("-n").stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(bash.stdin.as_mut().unwrap(), script.as_bytes()).unwrap();
    let out = bash.wait_with_output().unwrap();
    assert!(out.status.success(), "bash -n: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn man_pages_are_generated_for_onefix_and_each_command() {
    let page = stdout(&["generate", "man"]);
    assert!(page.contains(".TH onefix 1"), "{page}");
    for c in COMMANDS {
        assert!(page.contains(c), "onefix(1) does not mention {c}");
    }
    let dir = std::env::temp_dir().join(format!("onefix-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    onefix(&["generate", "man", "--dir", dir.to_str().unwrap()]);
    for c in COMMANDS {
        let sub = std::fs::read_to_string(dir.join(format!("onefix-{c}.1"))).unwrap();
        assert!(sub.contains(&format!(".TH onefix-{c} 1")), "{sub}");
    }
    let record = std::fs::read_to_string(dir.join("onefix-record.1")).unwrap();
    assert!(record.contains("pid"), "{record}");
    // groff renders it without complaint, where groff is installed.
    if Command::new("groff").arg("--version").output().is_ok() {
        let out =
            Command::new("groff").args(["-man", "-Tutf8", "-ww", "-z"]).arg(dir.join("onefix.1")).output().unwrap();
        assert!(out.status.success() && out.stderr.is_empty(), "groff: {}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_shell_is_one_sentence() {
    let out = Command::new(env!("CARGO_BIN_EXE_onefix")).args(["generate", "completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value 'tcsh'") && !err.contains("panicked"), "{err}");
}
