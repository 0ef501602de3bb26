//! What `record` and `report` share: deciding the user's code, diagnosing, writing outputs.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use onefix_diagnose::{diagnose, Diagnosis, KnowledgeBase, Options, UserCode};
use onefix_model::{Mode, Profile};
use onefix_report::{
    write_flamegraph, write_folded, write_html, write_json, write_pprof, write_speedscope, write_terminal, FlamegraphOptions, FoldedOptions,
    FileSystemSources, HtmlRun, JsonOptions, TerminalOptions,
};

use crate::cli::{ModeArg, OutputArgs};

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Wall => Mode::Wall,
            ModeArg::Cpu => Mode::Cpu,
        }
    }
}

/// The user's code: `--user-code` when given, else what the recording says, else the target's
/// working directory and the directory of the script it runs.
pub fn user_code(profile: &Profile, args: &OutputArgs) -> UserCode {
    let base = profile.meta.target.cwd.as_deref().map(Path::new);
    if !args.user_code.is_empty() {
        let dirs: Vec<PathBuf> = args
            .user_code
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()))
            .collect();
        return UserCode::new(dirs, base);
    }
    UserCode::new(profile.meta.user_code.iter().map(PathBuf::from), base)
}

/// Default user-code directories for a target: its working directory and its script's.
pub fn default_user_dirs(cwd: Option<&str>, argv: &[String]) -> Vec<String> {
    let mut dirs: Vec<String> = cwd.map(str::to_owned).into_iter().collect();
    // The script is the first argument after the interpreter's own options that names a file.
    if let Some(script) = argv.iter().skip(1).find(|a| !a.starts_with('-')) {
        let path = Path::new(script);
        let path = match (path.is_absolute(), cwd) {
            (false, Some(c)) => Path::new(c).join(path),
            _ => path.to_path_buf(),
        };
        if path.is_file() {
            if let Some(dir) = path.parent() {
                let dir = dir.display().to_string();
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
        }
    }
    dirs
}

/// Default user-code directories for a native target: its working directory, and the project
/// its executable was built in (the nearest ancestor of the executable holding Cargo.toml,
/// go.mod, Makefile, CMakeLists.txt or .git), where the debug info says its sources are.
pub fn default_native_user_dirs(cwd: Option<&str>, pid: u32) -> Vec<String> {
    let mut dirs: Vec<String> = cwd.map(str::to_owned).into_iter().collect();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    // The directory of the program's main source file, from its debug information: its own
    // code, even when the binary was built elsewhere (a temp dir, `go build -o /tmp/x`).
    if let Some(dir) = onefix_native::main_source_dir(Path::new(&format!("/proc/{pid}/exe"))) {
        let dir = dir.display().to_string();
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let markers = ["Cargo.toml", "go.mod", "Makefile", "CMakeLists.txt", ".git"];
    if let Some(root) = exe.as_deref().and_then(Path::parent).and_then(|d| {
        d.ancestors().take(5).find(|a| markers.iter().any(|m| a.join(m).exists()))
    }) {
        let root = root.display().to_string();
        if !dirs.contains(&root) {
            dirs.push(root);
        }
    }
    dirs
}

/// The built-in knowledge base, parsed once per process.
fn knowledge_base() -> &'static KnowledgeBase {
    static KB: std::sync::OnceLock<KnowledgeBase> = std::sync::OnceLock::new();
    KB.get_or_init(KnowledgeBase::builtin)
}

pub fn run_diagnosis(profile: &Profile, mode: Mode, args: &OutputArgs) -> Diagnosis {
    let user = user_code(profile, args);
    diagnose(profile, knowledge_base(), &user, &Options { mode, cpus: Machine::of(profile).map(|m| m.cpus), ..Options::default() })
}

/// The diagnosis with every user line in `hot_lines`, not only the hottest: for comparing
/// recordings slice by slice.
pub fn run_diagnosis_all_lines(profile: &Profile, mode: Mode) -> Diagnosis {
    let user = user_code(profile, &OutputArgs::default());
    diagnose(profile, knowledge_base(), &user, &Options { mode, max_hot_lines: usize::MAX, cpus: Machine::of(profile).map(|m| m.cpus), ..Options::default() })
}

/// The name of the recording machine's facts among a recording's attachments.
pub const MACHINE_ATTACHMENT: &str = "machine";

/// What the diagnosis needs to know of the machine a recording was made on.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Machine {
    /// CPUs the target could run on.
    pub cpus: u32,
}

impl Machine {
    pub fn this() -> Machine {
        Machine { cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32) }
    }

    /// The machine a recording was made on; `None` for recordings made before it was kept.
    pub fn of(profile: &Profile) -> Option<Machine> {
        profile.attachments.get(MACHINE_ATTACHMENT).and_then(|b| serde_json::from_slice(b).ok())
    }
}

/// Writes every output asked for, then the terminal summary on stdout. An output that cannot
/// be written is reported and the others are still written.
pub fn write_all(profile: &Profile, diagnosis: &Diagnosis, mode: Mode, args: &OutputArgs, complete: bool) -> Result<()> {
    let mut failures = Vec::new();
    let mut out = |path: &Option<PathBuf>, what: &str, f: &dyn Fn(&mut dyn Write) -> io::Result<()>| {
        if let Some(path) = path {
            if let Err(e) = write_file(path, f) {
                failures.push(format!("could not write the {what} to {}: {e}", path.display()));
            }
        }
    };
    let title = profile.meta.target.argv.as_ref().map(|a| format!("onefix: {}", a.join(" ")));
    out(&args.json, "JSON report", &|w| write_json(w, profile, diagnosis, &JsonOptions { complete }));
    out(&args.flamegraph, "flame graph", &|w| {
        write_flamegraph(w, profile, mode, &FlamegraphOptions { title: title.clone(), thread_prefix: false })
    });
    out(&args.speedscope, "speedscope profile", &|w| write_speedscope(w, profile, mode));
    out(&args.folded, "folded stacks", &|w| write_folded(w, profile, mode, &FoldedOptions::default()));
    out(&args.pprof, "pprof profile", &|w| write_pprof(w, profile, mode));
    out(&args.html, "HTML report", &|w| {
        let run = HtmlRun { label: "recording".to_owned(), profile, diagnosis, mode, complete };
        write_html(w, &[run], &FileSystemSources { cwd: profile.meta.target.cwd.clone() })
    });

    let stdout = io::stdout();
    let color = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let opts = TerminalOptions { color, complete, ..TerminalOptions::default() };
    write_terminal(stdout.lock(), profile, diagnosis, &opts).context("could not print the summary")?;
    if failures.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}", failures.join("; "))
    }
}

fn write_file(path: &Path, f: &dyn Fn(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let mut w = BufWriter::new(File::create(path)?);
    f(&mut w)?;
    w.flush()
}
