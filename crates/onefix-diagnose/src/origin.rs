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
        UserCode { dirs: dirs.into_iter().map(|d| normalize(d.as_ref())).collect(), base: base.map(normalize) }
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
}
