//! Whose code a frame is: the user's, the standard library's, a third-party package's, or the
//! runtime's. The frontier of a sample is its deepest frame in the user's code.

use std::path::{Component, Path, PathBuf};

use onefix_model::{Frame, FrameKind};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    User,
    Stdlib,
    ThirdParty,
    /// Interpreter, C library, kernel, or code the program generated (`<string>`).
    Runtime,
}

/// The directories that hold the user's own code.
#[derive(Clone, Debug, Default)]
pub struct UserCode {
    dirs: Vec<PathBuf>,
    /// The user directories that lie inside a tree never taken as the user's by default (an
    /// installed package, the standard library): naming one is an explicit choice, the
    /// maintainer's view of that package, and wins over the exclusion.
    claimed: Vec<PathBuf>,
    /// Relative file names in frames are resolved against this (the target's working directory).
    base: Option<PathBuf>,
}

/// Path fragments that mark installed third-party code, whatever the language.
const THIRD_PARTY_MARKERS: &[&str] = &[
    "/site-packages/",
    "/dist-packages/",
    "/.cargo/registry/",
    "/.cargo/git/",
    "/go/pkg/mod/",
    "/node_modules/",
    "/.venv/",
];
/// Path fragments that mark a language's standard library or runtime sources.
const STDLIB_MARKERS: &[&str] = &["/rustc/", "/usr/lib/go", "/usr/local/go/src/", "/usr/include/"];

impl UserCode {
    /// User code lives under `dirs`; relative frame paths resolve against `base`.
    pub fn new<P: AsRef<Path>>(dirs: impl IntoIterator<Item = P>, base: Option<&Path>) -> UserCode {
        let dirs: Vec<PathBuf> = dirs.into_iter().map(|d| normalize(d.as_ref())).collect();
        let claimed = dirs.iter().filter(|d| is_excluded_by_default(&format!("{}/", d.display()))).cloned().collect();
        UserCode { dirs, claimed, base: base.map(normalize) }
    }

    /// The user code a recording says it has: the directories it was recorded with, relative
    /// paths against the target's working directory.
    pub fn of_recording(profile: &onefix_model::Profile) -> UserCode {
        let base = profile.meta.target.cwd.as_deref().map(Path::new);
        UserCode::new(profile.meta.user_code.iter().map(PathBuf::from), base)
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// The directory relative frame paths resolve against.
    pub fn base(&self) -> Option<&Path> {
        self.base.as_deref()
    }

    /// Resolves a frame's file as the target saw it to an absolute path, when it can.
    pub fn resolve(&self, file: &str) -> Option<PathBuf> {
        if file.is_empty() || file.starts_with('<') {
            return None;
        }
        let p = Path::new(file);
        if p.is_absolute() {
            Some(normalize(p))
        } else {
            self.base.as_ref().map(|b| normalize(&b.join(p)))
        }
    }

    pub fn origin(&self, frame: &Frame) -> Origin {
        if frame.kind == FrameKind::Kernel {
            return Origin::Runtime;
        }
        let file = frame.file.as_str();
        if file.is_empty() || file.starts_with('<') {
            // No source (native without debug info) or generated code (`<frozen ...>`).
            return if file.starts_with("<frozen") { Origin::Stdlib } else { Origin::Runtime };
        }
        // Debug info of native libraries names sources relative to where they were built
        // (`Modules/_ssl.c`): never the user's, whatever directory the target runs in.
        if frame.kind == FrameKind::Native && !Path::new(file).is_absolute() {
            return Origin::Runtime;
        }
        // A native frame belongs to the binary it runs in: an interpreter's extension modules
        // and the system's libraries are never the user's, wherever their sources were built.
        if frame.kind == FrameKind::Native {
            let module = frame.module.as_str();
            if THIRD_PARTY_MARKERS.iter().any(|m| module.contains(m)) {
                return Origin::ThirdParty;
            }
            if python_lib_root(module).is_some()
                || ["/usr/lib", "/lib/", "/lib64/", "/usr/local/lib/"].iter().any(|m| module.starts_with(m))
            {
                return Origin::Runtime;
            }
        }
        if !self.claimed.is_empty() {
            if let Some(path) = self.resolve(file) {
                if self.claimed.iter().any(|d| path.starts_with(d)) && is_plausible_source(file, frame.line) {
                    return Origin::User;
                }
            }
        }
        if THIRD_PARTY_MARKERS.iter().any(|m| file.contains(m)) {
            return Origin::ThirdParty;
        }
        if is_python_stdlib(file) || STDLIB_MARKERS.iter().any(|m| file.contains(m)) {
            return Origin::Stdlib;
        }
        match self.resolve(file) {
            Some(path) if self.dirs.iter().any(|d| path.starts_with(d)) && is_plausible_source(file, frame.line) => {
                Origin::User
            }
            // Source outside the user's directories and outside any package manager's tree:
            // someone else's code all the same.
            _ => Origin::ThirdParty,
        }
    }
}

/// Why a file is not taken as the user's code by default, and the directory a user would name
/// to claim it (`--user-code`), for the note that says so.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Exclusion {
    /// An installed package; the directory is the package's own (`…/site-packages/multipart`).
    Package { dir: String, name: String },
    /// A language's standard library; the directory is the library's root.
    Stdlib { dir: String },
}

impl Exclusion {
    pub fn dir(&self) -> &str {
        match self {
            Exclusion::Package { dir, .. } | Exclusion::Stdlib { dir } => dir,
        }
    }

    /// The exclusion a path falls under, if any.
    pub fn of_path(file: &str) -> Option<Exclusion> {
        for marker in THIRD_PARTY_MARKERS {
            if let Some(i) = file.rfind(marker) {
                let root = i + marker.len();
                let rest: Vec<&str> = file[root..].split('/').collect();
                // How many directories under the marker name one package: a crate's
                // `src/index…/name-1.2.3`, a git checkout's `checkouts/name-hash/rev`, a Go
                // module's path up to its `@version`, an npm `@scope/name`, else one.
                let depth = match *marker {
                    "/.cargo/registry/" => 3,
                    "/.cargo/git/" => 3,
                    "/go/pkg/mod/" => rest.iter().position(|c| c.contains('@')).map_or(1, |i| i + 1),
                    "/node_modules/" if rest.first().is_some_and(|c| c.starts_with('@')) => 2,
                    _ => 1,
                };
                if rest.len() < depth || rest[..depth].iter().any(|c| c.is_empty()) {
                    continue;
                }
                let dir = format!("{}{}", &file[..root], rest[..depth].join("/"));
                let last = rest[depth - 1];
                let name = match *marker {
                    "/.cargo/registry/" => last.rsplit_once('-').map_or(last, |(n, _)| n),
                    "/.cargo/git/" => rest[1].rsplit_once('-').map_or(rest[1], |(n, _)| n),
                    "/go/pkg/mod/" => last.split('@').next().unwrap_or(last),
                    _ => last.trim_end_matches(".py"),
                };
                let name = name.to_owned();
                return Some(Exclusion::Package { dir, name });
            }
        }
        if let Some(root) = python_lib_root(file) {
            return Some(Exclusion::Stdlib { dir: file[..root].trim_end_matches('/').to_owned() });
        }
        for marker in STDLIB_MARKERS {
            if let Some(i) = file.find(marker) {
                return Some(Exclusion::Stdlib { dir: file[..i + marker.len()].trim_end_matches('/').to_owned() });
            }
        }
        None
    }
}

/// The directories of the installed packages named `names` (`--package`) among the files a
/// recording's frames ran in: an import name (`multipart`), a distribution's name as installed
/// (`python-multipart`, read from its `*.dist-info`), a crate's or a Go module's name. Returns
/// the directories, and the names that matched no frame.
pub fn package_dirs<'a>(files: impl IntoIterator<Item = &'a str>, names: &[String]) -> (Vec<PathBuf>, Vec<String>) {
    let wanted: Vec<String> = names.iter().map(|n| normalize_package_name(n)).collect();
    let mut found: Vec<PathBuf> = Vec::new();
    let mut matched = vec![false; names.len()];
    let mut seen_dirs = std::collections::HashSet::new();
    // Distribution names by import name, per site-packages directory, read once.
    let mut distributions: std::collections::HashMap<PathBuf, Vec<(String, String)>> = Default::default();
    for file in files {
        let Some(Exclusion::Package { dir, name }) = Exclusion::of_path(file) else { continue };
        if !seen_dirs.insert(dir.clone()) {
            continue;
        }
        let dir = PathBuf::from(dir);
        let import = normalize_package_name(&name);
        let installed_as: Vec<String> = match dir.parent() {
            Some(parent) if parent.ends_with("site-packages") || parent.ends_with("dist-packages") => distributions
                .entry(parent.to_path_buf())
                .or_insert_with(|| distribution_names(parent))
                .iter()
                .filter(|(_, top)| normalize_package_name(top) == import)
                .map(|(dist, _)| normalize_package_name(dist))
                .collect(),
            _ => Vec::new(),
        };
        for (i, w) in wanted.iter().enumerate() {
            if *w == import || installed_as.contains(w) {
                matched[i] = true;
                if !found.contains(&dir) {
                    found.push(dir.clone());
                }
            }
        }
    }
    let unmatched = names.iter().zip(&matched).filter(|(_, m)| !**m).map(|(n, _)| n.clone()).collect();
    (found, unmatched)
}

/// PEP 503's normal form, which also equates an import name's `_` with a distribution's `-`.
fn normalize_package_name(name: &str) -> String {
    name.to_ascii_lowercase().replace(['-', '.'], "_")
}

/// (distribution, top-level import name) of every `*.dist-info` in a site-packages directory,
/// from its `top_level.txt`, else the first directories its `RECORD` lists.
fn distribution_names(site_packages: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(site_packages) else { return out };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".dist-info")) else { continue };
        // `python_multipart-0.0.17.dist-info`: the name is before the version.
        let dist = stem.split_once('-').map_or(stem, |(n, _)| n).to_owned();
        let tops: Vec<String> = match std::fs::read_to_string(entry.path().join("top_level.txt")) {
            Ok(text) => text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect(),
            Err(_) => std::fs::read_to_string(entry.path().join("RECORD"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.split(',').next())
                .filter_map(|path| path.split_once('/').map(|(top, _)| top))
                .filter(|top| !top.ends_with(".dist-info") && !top.starts_with("__") && !top.starts_with(".."))
                .map(str::to_owned)
                .collect(),
        };
        for top in tops {
            if !out.contains(&(dist.clone(), top.clone())) {
                out.push((dist.clone(), top));
            }
        }
    }
    out
}

/// Whether a path lies in a tree never taken as the user's code by default.
fn is_excluded_by_default(path: &str) -> bool {
    THIRD_PARTY_MARKERS.iter().chain(STDLIB_MARKERS).any(|m| path.contains(m)) || python_lib_root(path).is_some()
}

/// A torn read can yield garbage names (`__doc__`, stray bytes) and lines: a user's frame is a
/// real line of a file with a source extension.
fn is_plausible_source(file: &str, line: u32) -> bool {
    let name = onefix_model::fmt::file_name(file);
    line > 0 && line < 10_000_000 && name.contains('.') && !file.chars().any(char::is_control)
}

/// `/usr/lib/python3.11/json/decoder.py`, `/root/.pyenv/versions/3.11.7/lib/python3.11/ssl.py`.
fn is_python_stdlib(file: &str) -> bool {
    python_lib_root(file).is_some()
}

/// Byte offset just after `.../lib/pythonX.Y/` (or `.../lib/python3/`), if the file is in one.
pub(crate) fn python_lib_root(file: &str) -> Option<usize> {
    let mut search = 0;
    while let Some(i) = file[search..].find("/lib/python") {
        let start = search + i + "/lib/python".len();
        let rest = &file[start..];
        let version_len = rest.find('/')?;
        let version = &rest[..version_len];
        if !version.is_empty() && version.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Some(start + version_len + 1);
        }
        search = start;
    }
    None
}

/// Lexical normalisation (no symlink resolution: the target's view of its paths is what counts).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(file: &str) -> Frame {
        Frame::python("f", file, 1)
    }

    #[test]
    fn classifies_python_paths() {
        let user = UserCode::new(["/srv/app"], Some(Path::new("/srv/app")));
        assert_eq!(user.origin(&py("/srv/app/worker.py")), Origin::User);
        assert_eq!(user.origin(&py("worker.py")), Origin::User, "relative to the target's cwd");
        assert_eq!(user.origin(&py("./lib/../worker.py")), Origin::User);
        assert_eq!(
            user.origin(&Frame::python("f", "/srv/app/__doc__", 0)),
            Origin::ThirdParty,
            "a torn read's garbage has no line"
        );
        assert_eq!(
            user.origin(&Frame::python("__package__", "__doc__", 436600831)),
            Origin::ThirdParty,
            "nor a source file"
        );
        assert_eq!(user.origin(&py("/usr/lib/python3.11/ssl.py")), Origin::Stdlib);
        assert_eq!(user.origin(&py("/root/.pyenv/versions/3.11.7/lib/python3.11/json/decoder.py")), Origin::Stdlib);
        assert_eq!(
            user.origin(&py("/srv/app/.venv/lib/python3.11/site-packages/httpx/_client.py")),
            Origin::ThirdParty,
            "a venv inside the project is not the user's code"
        );
        assert_eq!(user.origin(&py("/usr/lib/python3/dist-packages/yaml/__init__.py")), Origin::ThirdParty);
        assert_eq!(user.origin(&py("<frozen importlib._bootstrap>")), Origin::Stdlib);
        assert_eq!(user.origin(&py("<string>")), Origin::Runtime);
        assert_eq!(user.origin(&py("/opt/vendor/tool.py")), Origin::ThirdParty);
    }

    #[test]
    fn classifies_native_paths() {
        let user = UserCode::new(["/src/agg"], None);
        let mut f = Frame::native("serde_json::de::from_str", "/src/agg/target/release/agg");
        f.file = "/root/.cargo/registry/src/index.crates.io-0000/serde_json-1.0.1/src/de.rs".into();
        assert_eq!(user.origin(&f), Origin::ThirdParty);
        f.file = "/src/agg/src/main.rs".into();
        f.line = 10;
        assert_eq!(user.origin(&f), Origin::User);
        f.file = "/rustc/abc/library/core/src/fmt/mod.rs".into();
        assert_eq!(user.origin(&f), Origin::Stdlib);
        assert_eq!(user.origin(&Frame::native("__libc_recv", "/usr/lib/x86_64-linux-gnu/libc.so.6")), Origin::Runtime);
        let mut relative =
            Frame::native("_ssl__SSLContext_load_verify_locations", "/usr/lib/python3.11/lib-dynload/_ssl.so");
        relative.file = "Modules/_ssl.c".into();
        let mut built_here = relative.clone();
        built_here.file = "/src/python-build/Modules/_ssl.c".into();
        assert_eq!(
            UserCode::new(["/src"], Some(Path::new("/src"))).origin(&built_here),
            Origin::Runtime,
            "an extension module is the runtime's"
        );
        assert_eq!(UserCode::new(["/src"], Some(Path::new("/src"))).origin(&relative), Origin::Runtime);
    }

    #[test]
    fn a_named_package_directory_is_user_code_though_installed() {
        let site = "/srv/app/.venv/lib/python3.11/site-packages";
        let user = UserCode::new([format!("{site}/multipart")], Some(Path::new("/srv/app")));
        assert_eq!(user.origin(&py(&format!("{site}/multipart/multipart.py"))), Origin::User);
        assert_eq!(user.origin(&py(&format!("{site}/httpx/_client.py"))), Origin::ThirdParty, "only the one named");
        let stdlib = UserCode::new(["/usr/lib/python3.11/json"], None);
        assert_eq!(stdlib.origin(&py("/usr/lib/python3.11/json/decoder.py")), Origin::User);
        assert_eq!(stdlib.origin(&py("/usr/lib/python3.11/ssl.py")), Origin::Stdlib);
        // The project's own directory does not claim the venv inside it.
        let project = UserCode::new(["/srv/app"], Some(Path::new("/srv/app")));
        assert_eq!(project.origin(&py(&format!("{site}/multipart/multipart.py"))), Origin::ThirdParty);
        let mut krate = Frame::native("toml::de::parse", "/tmp/driver/target/release/driver");
        krate.file = "/root/.cargo/registry/src/index.crates.io-0000/toml-0.5.1/src/de.rs".into();
        krate.line = 40;
        let maintainer = UserCode::new(["/root/.cargo/registry/src/index.crates.io-0000/toml-0.5.1"], None);
        assert_eq!(maintainer.origin(&krate), Origin::User);
    }

    #[test]
    fn an_exclusion_names_the_package_and_its_directory() {
        let package = |dir: &str, name: &str| Some(Exclusion::Package { dir: dir.into(), name: name.into() });
        assert_eq!(
            Exclusion::of_path("/v/lib/python3.11/site-packages/multipart/multipart.py"),
            package("/v/lib/python3.11/site-packages/multipart", "multipart")
        );
        assert_eq!(
            Exclusion::of_path("/v/lib/python3.11/site-packages/six.py"),
            package("/v/lib/python3.11/site-packages/six.py", "six")
        );
        assert_eq!(
            Exclusion::of_path("/root/.cargo/registry/src/index.crates.io-0000/regex-automata-0.4.3/src/dfa.rs"),
            package("/root/.cargo/registry/src/index.crates.io-0000/regex-automata-0.4.3", "regex-automata")
        );
        assert_eq!(
            Exclusion::of_path("/root/go/pkg/mod/github.com/goccy/go-json@v0.10.2/decode.go"),
            package("/root/go/pkg/mod/github.com/goccy/go-json@v0.10.2", "go-json")
        );
        assert_eq!(
            Exclusion::of_path("/usr/lib/python3.11/json/decoder.py"),
            Some(Exclusion::Stdlib { dir: "/usr/lib/python3.11".into() })
        );
        assert_eq!(Exclusion::of_path("/srv/app/main.py"), None);
    }
}
