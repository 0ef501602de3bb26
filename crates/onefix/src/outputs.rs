//! What `record` and `report` share: deciding the user's code, diagnosing, writing outputs.

use onefix_model::fmt::escape_controls_keeping_lines;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use onefix_diagnose::{diagnose, Diagnosis, KnowledgeBase, Options, UserCode};
use onefix_model::{Mode, Profile};
use onefix_report::{
    write_firefox, write_flamegraph, write_folded, write_html, write_json, write_pprof, write_sarif, write_speedscope,
    write_terminal, FileSystemSources, FlamegraphOptions, FoldedOptions, HtmlRun, JsonOptions, SarifOptions,
    TerminalOptions,
};

use crate::cli::{ModeArg, OutputArgs};
use crate::output::{self, Output, OutputError, RecordingFile};
use onefix_load::{summary, LoadResult};

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
/// With `--package`, the named packages' directories, alone or beside `--user-code`'s.
pub fn user_code(profile: &Profile, args: &OutputArgs) -> UserCode {
    let args = &view_of(profile, args);
    if args.user_code.is_empty() && args.packages.is_empty() {
        return UserCode::of_recording(profile);
    }
    let base = profile.meta.target.cwd.as_deref().map(Path::new);
    let mut dirs: Vec<PathBuf> =
        args.user_code.iter().map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())).collect();
    dirs.extend(package_dirs(profile, args).0);
    UserCode::new(dirs, base)
}

/// `--user-code` and `--package` as given now, or, when neither is, as given to `record`
/// (kept in the recording): a recording is read the way it was asked to be read.
pub fn view_of<'a>(profile: &Profile, args: &'a OutputArgs) -> std::borrow::Cow<'a, OutputArgs> {
    match profile.view() {
        Some(view) if args.user_code.is_empty() && args.packages.is_empty() => {
            let mut recorded = args.clone();
            recorded.user_code = view.user_code.iter().map(PathBuf::from).collect();
            recorded.packages = view.packages;
            std::borrow::Cow::Owned(recorded)
        }
        _ => std::borrow::Cow::Borrowed(args),
    }
}

/// The directories of `--package`'s names among the recording's frames, and the names that
/// matched none.
fn package_dirs(profile: &Profile, args: &OutputArgs) -> (Vec<PathBuf>, Vec<String>) {
    if args.packages.is_empty() {
        return (Vec::new(), Vec::new());
    }
    onefix_diagnose::package_dirs(profile.frames().iter().map(|f| f.file.as_str()), &args.packages)
}

/// Says, once, which `--package` names no recorded frame ran in, and which packages did run.
/// True when every name given matched nothing and no `--user-code` was given either: the view
/// asked for has no code in the recording.
pub fn warn_unmatched_packages(profile: &Profile, args: &OutputArgs) -> bool {
    let args = &view_of(profile, args);
    let (matched, unmatched) = package_dirs(profile, args);
    if unmatched.is_empty() {
        return false;
    }
    let mut seen: Vec<String> = profile
        .frames()
        .iter()
        .filter_map(|f| match onefix_diagnose::Exclusion::of_path(&f.file) {
            Some(onefix_diagnose::Exclusion::Package { name, .. }) => Some(name),
            _ => None,
        })
        .collect();
    seen.sort();
    seen.dedup();
    let seen = if seen.is_empty() { "none".to_owned() } else { seen.join(", ") };
    eprintln!(
        "onefix: --package {}: no recorded frame ran in an installed package of that name (packages that ran: {seen})",
        unmatched.join(", ")
    );
    matched.is_empty() && args.user_code.is_empty()
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
    if let Some(root) = exe
        .as_deref()
        .and_then(Path::parent)
        .and_then(|d| d.ancestors().take(5).find(|a| markers.iter().any(|m| a.join(m).exists())))
    {
        let root = root.display().to_string();
        if !dirs.contains(&root) {
            dirs.push(root);
        }
    }
    dirs
}

/// The built-in knowledge base, parsed once per process.
pub fn knowledge_base() -> &'static KnowledgeBase {
    static KB: std::sync::OnceLock<KnowledgeBase> = std::sync::OnceLock::new();
    KB.get_or_init(KnowledgeBase::builtin)
}

/// Settles which samples ran on a CPU ([`onefix_diagnose::settle_running`]) and which line a
/// read caught late belongs to ([`onefix_diagnose::settle_stale_reads`]) before the diagnosis
/// and the writers read them, so that all of them count the same time at the same lines.
pub fn settle_running(profile: &mut Profile, args: &OutputArgs) {
    let user = user_code(profile, args);
    onefix_diagnose::settle_stale_reads(profile, &user);
    onefix_diagnose::settle_running(profile, knowledge_base(), &user);
}

pub fn run_diagnosis(profile: &Profile, mode: Mode, args: &OutputArgs) -> Diagnosis {
    diagnose_with(profile, mode, args, |_| {})
}

/// [`run_diagnosis`] with options adjusted by `adjust` (an imported profile's missing timeline).
pub fn diagnose_with(profile: &Profile, mode: Mode, args: &OutputArgs, adjust: impl FnOnce(&mut Options)) -> Diagnosis {
    let user = user_code(profile, args);
    let mut opts = Options { mode, cpus: profile.machine().map(|m| m.cpus), ..Options::default() };
    adjust(&mut opts);
    diagnose(profile, knowledge_base(), &user, &opts)
}

/// The outputs of `OutputArgs`, each checked (and its temporary file made) before anything runs.
#[derive(Default)]
pub struct Planned {
    pub json: Option<Output>,
    pub flamegraph: Option<Output>,
    pub speedscope: Option<Output>,
    pub folded: Option<Output>,
    pub pprof: Option<Output>,
    pub html: Option<Output>,
    pub firefox: Option<Output>,
    pub sarif: Option<Output>,
    /// The terminal summary goes to stderr even when no output takes stdout: `record`'s, when
    /// stdout is not a terminal, since the target writes there too (`record -- tool > out`).
    pub summary_on_stderr: bool,
}

impl Planned {
    pub fn check(args: &OutputArgs) -> Result<Planned, OutputError> {
        let one =
            |p: &Option<PathBuf>, what, stdout_ok| p.as_deref().map(|p| output::check(p, what, stdout_ok)).transpose();
        Ok(Planned {
            json: one(&args.json, "JSON report", true)?,
            flamegraph: one(&args.flamegraph, "flame graph", true)?,
            speedscope: one(&args.speedscope, "speedscope profile", true)?,
            folded: one(&args.folded, "folded stacks", true)?,
            pprof: one(&args.pprof, "pprof profile", false)?,
            html: one(&args.html, "HTML report", true)?,
            firefox: one(&args.firefox, "Firefox Profiler profile", true)?,
            sarif: one(&args.sarif, "SARIF report", true)?,
            summary_on_stderr: false,
        })
    }

    pub fn all(&self) -> Vec<&Output> {
        [
            &self.json,
            &self.flamegraph,
            &self.speedscope,
            &self.folded,
            &self.pprof,
            &self.html,
            &self.firefox,
            &self.sarif,
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Whether one of them is standard output: the terminal summary then goes to stderr.
    pub fn uses_stdout(&self) -> bool {
        self.all().iter().any(|o| o.is_stdout())
    }
}

/// Writes every output asked for, then the terminal summary (on stdout, or on stderr when an
/// output took stdout). An output that cannot be written is reported and the others are still
/// written.
pub fn write_all(profile: &Profile, diagnosis: &Diagnosis, mode: Mode, planned: Planned, complete: bool) -> Result<()> {
    let summary_to_stderr = planned.uses_stdout() || planned.summary_on_stderr;
    let mut failures = Vec::new();
    let mut out = |o: Option<Output>, f: &dyn Fn(&mut dyn Write) -> io::Result<()>| {
        if let Some(o) = o {
            let (what, shown) = (o.what, o.shown.clone());
            if let Err(e) = o.write_with(f) {
                failures.push(format!("could not write the {what} to {} ({e})", shown.display()));
            }
        }
    };
    let title = profile.meta.target.argv.as_ref().map(|a| format!("onefix: {}", a.join(" ")));
    out(planned.json, &|w| write_json(w, profile, diagnosis, &JsonOptions { complete }));
    out(planned.flamegraph, &|w| {
        write_flamegraph(w, profile, mode, &FlamegraphOptions { title: title.clone(), thread_prefix: false })
    });
    out(planned.speedscope, &|w| write_speedscope(w, profile, mode));
    out(planned.folded, &|w| write_folded(w, profile, mode, &FoldedOptions::default()));
    out(planned.pprof, &|w| write_pprof(w, profile, mode));
    out(planned.html, &|w| {
        let run = HtmlRun { label: "recording".to_owned(), profile, diagnosis, mode, complete };
        write_html(w, &[run], &FileSystemSources { cwd: profile.meta.target.cwd.clone() })
    });
    out(planned.firefox, &|w| write_firefox(w, profile, diagnosis, mode));
    // Code scanning matches results to the repository's files by their path under the
    // checkout, where CI runs onefix.
    let source_root = std::env::current_dir().ok();
    out(planned.sarif, &|w| write_sarif(w, profile, diagnosis, &SarifOptions { source_root: source_root.clone() }));

    if summary_to_stderr {
        let opts = TerminalOptions { color: false, complete, ..TerminalOptions::default() };
        write_terminal(io::stderr().lock(), profile, diagnosis, &opts).context("could not print the summary")?;
    } else {
        let stdout = io::stdout();
        let color = stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none();
        let width = terminal_width().unwrap_or(onefix_report::DEFAULT_WIDTH);
        let opts = TerminalOptions { color, complete, width, ..TerminalOptions::default() };
        write_terminal(stdout.lock(), profile, diagnosis, &opts).context("could not print the summary")?;
    }
    if failures.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("{}", failures.join("; "))
    }
}

/// The `--fail-on` conditions a finding meets, said in one line each; `true` when any is met,
/// and the run should end with [`crate::messages::GATE_FAILED`].
pub fn fail_on_met(diagnosis: &Diagnosis, args: &OutputArgs) -> bool {
    let failing = onefix_diagnose::gate::failing(&args.fail_on, &diagnosis.findings);
    for (finding, condition) in &failing {
        crate::messages::say(format_args!(
            "--fail-on {condition}: finding #{} ({}, {:.1}% of {}) at {}:{}",
            finding.rank,
            finding.kind,
            finding.share * 100.0,
            diagnosis.share_of,
            finding.file,
            finding.line
        ));
    }
    !failing.is_empty()
}

/// The width of the terminal on stdout, within reason (80 to 220 columns); `None` when stdout is
/// not a terminal, so that piped and saved summaries stay the same.
fn terminal_width() -> Option<usize> {
    if !io::stdout().is_terminal() {
        return None;
    }
    terminal_size(libc::STDOUT_FILENO).map(|(columns, _)| columns.clamp(80, 220))
}

/// The size of the terminal on descriptor `fd` as (columns, rows); `None` when it is no terminal.
pub fn terminal_size(fd: libc::c_int) -> Option<(usize, usize)> {
    // SAFETY: an all-zero winsize is valid, and TIOCGWINSZ fills it for a terminal; on any other
    // descriptor it fails harmlessly.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col as usize, size.ws_row as usize))
}

/// Everything `record` writes, checked before the target starts.
pub struct RecordPlan {
    pub recording: RecordingFile,
    pub outputs: Planned,
    /// The driven load's JSON result (`--load "... --json PATH"`).
    pub load_json: Option<Output>,
}

/// What `-o PATH` means by its extension, where people expect one: py-spy's `-o profile.svg`
/// is a flame graph. The recording is then kept under its default name.
fn output_by_extension(path: &Path) -> Option<Result<&'static str, String>> {
    let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    let flag = if name.ends_with(".svg") {
        "--flamegraph"
    } else if name.ends_with(".html") || name.ends_with(".htm") {
        "--html"
    } else if name.ends_with(".pb.gz") || name.ends_with(".pprof") {
        "--pprof"
    } else if name.ends_with(".folded") || name.ends_with(".txt") {
        "--folded"
    } else if name.ends_with(".sarif") {
        "--sarif"
    } else if name.ends_with(".speedscope.json") {
        "--speedscope"
    } else if name.ends_with(".json") {
        return Some(Err(format!(
            "-o {} names the recording, and .json could mean two outputs: give --json {0} for the findings, or --speedscope {0} for a speedscope profile",
            path.display()
        )));
    } else {
        return None;
    };
    Some(Ok(flag))
}

/// Resolves `-o`, `--no-save` and the output flags into checked outputs, refusing in one
/// sentence anything that could not be written (or two outputs on one file) before the target
/// starts. `default_name` names the recording when `-o` does not. `starts_target`: the target
/// is a command onefix starts, which writes to the same stdout.
pub fn plan_record(
    output: Option<&Path>,
    no_save: bool,
    default_name: impl FnOnce() -> PathBuf,
    args: &OutputArgs,
    load_json: Option<&Path>,
    quiet: bool,
    starts_target: bool,
) -> Result<RecordPlan> {
    let mut args = args.clone();
    let mut recording_path = output.map(Path::to_path_buf);
    if let Some(path) = output {
        match output_by_extension(path) {
            Some(Err(sentence)) => anyhow::bail!("{sentence}"),
            Some(Ok(flag)) => {
                let slot = match flag {
                    "--flamegraph" => &mut args.flamegraph,
                    "--html" => &mut args.html,
                    "--pprof" => &mut args.pprof,
                    "--folded" => &mut args.folded,
                    "--sarif" => &mut args.sarif,
                    _ => &mut args.speedscope,
                };
                if let Some(other) = slot {
                    anyhow::bail!(
                        "-o {} asks for what {flag} {} already gives: keep one of the two",
                        path.display(),
                        other.display()
                    );
                }
                *slot = Some(path.to_path_buf());
                recording_path = None;
                if !quiet && !no_save {
                    crate::messages::say(format_args!(
                        "-o {} is written as {flag} would write it; the recording keeps its default name",
                        path.display()
                    ));
                }
            }
            None if no_save => {
                anyhow::bail!("--no-save keeps no recording, but -o {} names one: give one of the two", path.display())
            }
            None => {}
        }
    }
    let recording = match (no_save, recording_path) {
        (true, _) => None,
        (false, Some(p)) => Some(output::check(&p, "recording", false)?),
        (false, None) => Some(output::check(&default_name(), "recording", false)?),
    };
    let mut outputs = Planned::check(&args)?;
    // A target onefix starts shares its stdout: when that is a file or a pipe, the program's
    // own output goes there alone, and onefix's summary to stderr (as py-spy and perf print
    // theirs). A process attached to (`--pid`) writes elsewhere.
    outputs.summary_on_stderr = starts_target && !io::stdout().is_terminal();
    let load_json = load_json.map(|p| output::check(p, "load's JSON result", true)).transpose()?;
    let mut all = outputs.all();
    all.extend(recording.iter());
    all.extend(load_json.iter());
    output::check_distinct(&all, &[])?;
    let recording = RecordingFile::create(recording)?;
    Ok(RecordPlan { recording, outputs, load_json })
}

/// Prints the summary of a load and writes its JSON result where asked.
/// The summary goes to stderr when the JSON result takes stdout (`--json -`).
pub fn emit_load(result: &LoadResult, json: Option<Output>, to_stderr: bool) -> Result<()> {
    match &json {
        Some(o) if o.is_stdout() || to_stderr => eprint!("{}", escape_controls_keeping_lines(&summary::render(result))),
        _ => print!("{}", escape_controls_keeping_lines(&summary::render(result))),
    }
    if let Some(out) = json {
        let shown = out.shown.display().to_string();
        out.write_with(|w| {
            serde_json::to_writer_pretty(&mut *w, result)?;
            writeln!(w)
        })
        .with_context(|| format!("cannot write the load's JSON result to {shown}"))?;
    }
    Ok(())
}
