//! The runtimes onefix cannot read yet, recognised from a process's executable and the files
//! it maps, so that each is named in one sentence with what to use meanwhile, instead of being
//! sampled as a native program whose frames are the runtime's own (the interpreter, the JIT,
//! the garbage collector) and whose advice (rebuild with -g, pass --user-code) does not apply.
//!
//! The knowledge is the table [`RUNTIMES`]: how each is recognised, what it is called, where
//! its version can be read without running anything of it, and what profiles it meanwhile.
//! Nothing here runs the target's programs (`node --version` against a production server is
//! not cheap, and not ours to start): versions come from paths, names and small files only.

use std::fmt;
use std::path::{Path, PathBuf};

/// A runtime onefix cannot read, and how it is recognised.
#[derive(Debug)]
pub struct Runtime {
    /// What it is called, without a version: `Node.js`, `the JVM`.
    pub name: &'static str,
    /// How it is called with its version, `{v}` standing for the version: `Node.js {v}`,
    /// `the JVM ({v})`.
    pub name_with_version: &'static str,
    /// The language whose frames cannot be read: `JavaScript`.
    pub language: &'static str,
    /// Names of its executable. A file name matches when it is one of these, alone or followed
    /// by a version (`pypy3.9`, `ruby3.1`, `php-fpm8.2`).
    pub executables: &'static [&'static str],
    /// Beginnings of the file name of a library only this runtime maps, and whose mapping makes
    /// the process that runtime (a JVM launched by any launcher, a .NET app's own host). An
    /// interpreter that native programs embed for plugins (libperl, libruby in an editor) is
    /// not listed: it does not make the program that language's.
    pub libraries: &'static [&'static str],
    /// Where its version is read.
    pub version: VersionSource,
    /// What profiles it meanwhile.
    pub meanwhile: &'static str,
}

/// Where a runtime's version can be read cheaply: from paths, names and small files, never by
/// running the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionSource {
    /// A directory `v20.11.0` under `node` (nvm) or `node-v20.11.0-linux-x64` (the release
    /// archives) in the executable's path; else the Node major of `libnode.so.N`, whose N is
    /// its module ABI.
    Node,
    /// `JAVA_VERSION` in the `release` file at the top of the JDK holding the executable or
    /// `libjvm.so`, else the first number of that JDK's directory (`java-17-openjdk-amd64`);
    /// shown with the build's name when its directory says it (`OpenJDK 17`).
    JavaHome,
    /// The directory holding `libcoreclr.so`: `…/Microsoft.NETCore.App/8.0.1/`.
    DotnetRuntimeDir,
    /// `-v7.3.17` in a path (`pypy3.10-v7.3.17-linux64`), else the `ppXY` ABI tag of its
    /// extension modules (`_cffi_backend.pypy39-pp73-x86_64-linux-gnu.so`), mapped or beside
    /// its standard library.
    PyPy,
    /// The first number after the matched name: `ruby3.1`, `php-fpm8.2`, `libphp8.2.so`,
    /// `perl5.36.0`.
    AfterName,
    /// The `erts-13.1.5` directory holding the executable.
    ErtsDir,
}

/// The runtimes onefix cannot read, first match wins. CPython and native programs are read, so
/// they are not here.
pub static RUNTIMES: &[Runtime] = &[
    Runtime {
        name: "PyPy",
        name_with_version: "PyPy {v}",
        language: "Python",
        executables: &["pypy", "pypy3"],
        libraries: &["libpypy"],
        version: VersionSource::PyPy,
        meanwhile: "vmprof (`pypy -m vmprof PROGRAM`)",
    },
    Runtime {
        name: "Node.js",
        name_with_version: "Node.js {v}",
        language: "JavaScript",
        executables: &["node", "nodejs"],
        libraries: &["libnode.so"],
        version: VersionSource::Node,
        meanwhile: "`node --cpu-prof` (or 0x, or clinic flame)",
    },
    Runtime {
        name: "the JVM",
        name_with_version: "the JVM ({v})",
        language: "Java",
        executables: &["java"],
        libraries: &["libjvm.so"],
        version: VersionSource::JavaHome,
        meanwhile: "async-profiler, or JFR (`-XX:StartFlightRecording`, or `jcmd PID JFR.start` on a running JVM)",
    },
    Runtime {
        name: ".NET",
        name_with_version: ".NET {v}",
        language: ".NET",
        executables: &["dotnet"],
        libraries: &["libcoreclr.so"],
        version: VersionSource::DotnetRuntimeDir,
        meanwhile: "dotnet-trace (`dotnet-trace collect -p PID`)",
    },
    Runtime {
        name: "Ruby",
        name_with_version: "Ruby {v}",
        language: "Ruby",
        executables: &["ruby"],
        libraries: &[],
        version: VersionSource::AfterName,
        meanwhile: "rbspy (`rbspy record --pid PID`)",
    },
    Runtime {
        name: "PHP",
        name_with_version: "PHP {v}",
        language: "PHP",
        executables: &["php", "php-fpm", "php-cgi"],
        libraries: &["libphp"],
        version: VersionSource::AfterName,
        meanwhile: "phpspy, or the SPX or Xdebug profiler",
    },
    Runtime {
        name: "Perl",
        name_with_version: "Perl {v}",
        language: "Perl",
        executables: &["perl"],
        libraries: &[],
        version: VersionSource::AfterName,
        meanwhile: "Devel::NYTProf (`perl -d:NYTProf PROGRAM`)",
    },
    Runtime {
        name: "the Erlang VM",
        name_with_version: "the Erlang VM (erts {v})",
        language: "Erlang and Elixir",
        executables: &["beam.smp", "beam"],
        libraries: &[],
        version: VersionSource::ErtsDir,
        meanwhile: "eprof or fprof (OTP's own profilers)",
    },
];

/// A process (or a program about to be run) found to be a runtime of [`RUNTIMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub runtime: &'static Runtime,
    /// Its version as it is shown (`20.11.0`, `OpenJDK 17`), when it could be read cheaply.
    pub version: Option<String>,
    /// The file name of its executable, as the process or the command names it.
    pub executable: String,
}

impl PartialEq for Runtime {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Runtime {}

impl Found {
    /// What it is called, with its version when known: `Node.js 20`, `the JVM (OpenJDK 17)`.
    pub fn called(&self) -> String {
        match &self.version {
            Some(v) => self.runtime.name_with_version.replace("{v}", v),
            None => self.runtime.name.to_owned(),
        }
    }
}

/// The one sentence: what onefix reads, what this is, what is lost, what to use meanwhile.
impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "onefix reads CPython and native programs; this is {} ({}): its {} frames cannot be read yet; meanwhile use {}",
            self.called(),
            self.executable,
            self.runtime.language,
            self.runtime.meanwhile
        )
    }
}

/// The runtime a running process is, from `/proc/PID/exe` and `/proc/PID/maps`; its version
/// files are read through `/proc/PID/root`, so a container's own are. `None` for CPython, a
/// native program, or a process that cannot be read.
pub fn of_process(pid: u32) -> Option<Found> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    recognise(&exe, mapped_files(&maps), Path::new(&format!("/proc/{pid}/root")))
}

/// The runtime a program about to be run is, from its path alone (nothing of it is mapped
/// yet): `path` as it would be run (a link keeps the name it was called by), its target for
/// the version.
pub fn of_executable(path: &Path) -> Option<Found> {
    let name = path.file_name()?.to_str()?;
    let resolved = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let runtime = RUNTIMES.iter().find(|r| named(r, name).is_some() || named_file(r, &resolved).is_some())?;
    let empty: [&str; 0] = [];
    let version = version_of(runtime, &resolved, None, empty.iter().copied(), Path::new("/"));
    Some(Found { runtime, version, executable: name.to_owned() })
}

/// The runtime of a process whose executable is `exe` and which maps `mapped` (paths as
/// `/proc/PID/maps` gives them), with its files under `root`. The executable's name decides
/// first; then a CPython (by its name or a mapped libpython) is no runtime of the table, even if
/// it maps one (a JVM through JPype); then a runtime's own library decides.
pub fn recognise<'a>(exe: &Path, mapped: impl Iterator<Item = &'a str> + Clone, root: &Path) -> Option<Found> {
    let executable = exe.file_name()?.to_string_lossy().into_owned();
    if let Some(runtime) = RUNTIMES.iter().find(|r| named(r, &executable).is_some()) {
        let version = version_of(runtime, exe, None, mapped, root);
        return Some(Found { runtime, version, executable });
    }
    let cpython = executable.starts_with("python")
        || mapped.clone().any(|path| onefix_model::fmt::file_name(path).starts_with("libpython"));
    if cpython {
        return None;
    }
    let (runtime, library) = mapped.clone().find_map(|path| {
        let name = onefix_model::fmt::file_name(path);
        RUNTIMES.iter().find(|r| r.libraries.iter().any(|l| name.starts_with(l))).map(|r| (r, path))
    })?;
    let version = version_of(runtime, exe, Some(Path::new(library)), mapped, root);
    Some(Found { runtime, version, executable })
}

/// The paths of the files a `/proc/PID/maps` text maps, each once, in order.
pub fn mapped_files(maps: &str) -> impl Iterator<Item = &str> + Clone {
    let mut seen: Vec<&str> = Vec::new();
    for line in maps.lines() {
        // address perms offset dev inode path; the path may hold spaces, and ends with
        // " (deleted)" once its file is gone.
        let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim_start) else { continue };
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        if path.starts_with('/') && !seen.contains(&path) {
            seen.push(path);
        }
    }
    seen.into_iter()
}

/// The part of `name` after one of `runtime`'s executable names, when it is one of them alone
/// or followed by a version.
fn named<'a>(runtime: &Runtime, name: &'a str) -> Option<&'a str> {
    runtime.executables.iter().find_map(|exe| {
        let rest = name.strip_prefix(exe)?;
        rest.bytes().all(|b| b.is_ascii_digit() || b == b'.').then_some(rest)
    })
}

/// Whether a resolved executable path is one of `runtime`'s by its file name.
fn named_file<'a>(runtime: &Runtime, path: &'a Path) -> Option<&'a str> {
    named(runtime, path.file_name()?.to_str()?)
}

/// The runtime's version from `exe`, the library it was recognised by, the other mapped files,
/// and small files under `root`.
fn version_of<'a>(
    runtime: &Runtime,
    exe: &Path,
    library: Option<&Path>,
    mapped: impl Iterator<Item = &'a str> + Clone,
    root: &Path,
) -> Option<String> {
    let library = library.or_else(|| {
        mapped.clone().map(Path::new).find(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            runtime.libraries.iter().any(|l| name.starts_with(l))
        })
    });
    match runtime.version {
        VersionSource::Node => node_version(exe).or_else(|| library.and_then(node_version_of_library)),
        VersionSource::JavaHome => java_version(library.unwrap_or(exe), root),
        VersionSource::DotnetRuntimeDir => library
            .and_then(Path::parent)
            .filter(|dir| dir.parent().and_then(Path::file_name).is_some_and(|n| n == "Microsoft.NETCore.App"))
            .and_then(|dir| dir.file_name()?.to_str().map(str::to_owned))
            .filter(|v| v.starts_with(|c: char| c.is_ascii_digit())),
        VersionSource::PyPy => pypy_version(exe, library, mapped, root),
        VersionSource::AfterName => {
            let after = |path: &Path| {
                let name = path.file_name()?.to_str()?;
                let rest = runtime
                    .executables
                    .iter()
                    .chain(runtime.libraries)
                    .filter_map(|stem| name.strip_prefix(stem))
                    .max_by_key(|rest| name.len() - rest.len())?;
                first_number(rest)
            };
            after(exe).or_else(|| library.and_then(after))
        }
        VersionSource::ErtsDir => {
            exe.ancestors().find_map(|dir| dir.file_name()?.to_str()?.strip_prefix("erts-")).and_then(first_number)
        }
    }
}

/// The first run of digits and dots in `text`, without its outer dots: `3.1` of `-3.1.so`.
fn first_number(text: &str) -> Option<String> {
    let start = text.find(|c: char| c.is_ascii_digit())?;
    let run: String = text[start..].chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    Some(run.trim_matches('.').to_owned()).filter(|v| !v.is_empty())
}

fn node_version(exe: &Path) -> Option<String> {
    let dirs: Vec<&str> = exe.iter().filter_map(|c| c.to_str()).collect();
    dirs.iter().enumerate().find_map(|(i, dir)| {
        let nvm = dir.strip_prefix('v').filter(|_| i > 0 && dirs[i - 1] == "node");
        let archive = dir.strip_prefix("node-v");
        nvm.or(archive).filter(|v| v.starts_with(|c: char| c.is_ascii_digit())).and_then(first_number)
    })
}

/// Node's major version from `libnode.so.N`, where N is its module ABI (NODE_MODULE_VERSION).
fn node_version_of_library(library: &Path) -> Option<String> {
    const MODULE_ABI: &[(u32, u32)] = &[
        (64, 10),
        (67, 11),
        (72, 12),
        (79, 13),
        (83, 14),
        (88, 15),
        (93, 16),
        (102, 17),
        (108, 18),
        (111, 19),
        (115, 20),
        (120, 21),
        (127, 22),
        (131, 23),
        (137, 24),
    ];
    let abi: u32 = library.file_name()?.to_str()?.strip_prefix("libnode.so.")?.split('.').next()?.parse().ok()?;
    MODULE_ABI.iter().find(|(a, _)| *a == abi).map(|(_, major)| major.to_string())
}

/// A JDK's version and build from the `release` file at its top, found from a file inside it
/// (`bin/java`, `lib/server/libjvm.so`, Java 8's `jre/lib/amd64/server/libjvm.so`).
fn java_version(inside: &Path, root: &Path) -> Option<String> {
    let under_root = |p: &Path| root.join(p.strip_prefix("/").unwrap_or(p));
    let homes: Vec<&Path> = inside.ancestors().skip(1).take(5).collect();
    let released = homes.iter().find_map(|home| {
        let text = read_small(&under_root(&home.join("release")))?;
        let version = text.lines().find_map(|l| l.strip_prefix("JAVA_VERSION="))?.trim_matches('"').to_owned();
        Some((*home, version))
    });
    // The JDK's directory: the one holding `release`, else the one above the deepest `bin` or
    // `lib` (above `jre` for Java 8).
    let home = released.as_ref().map(|(h, _)| *h).or_else(|| {
        let above = inside.ancestors().find(|a| a.file_name().is_some_and(|n| n == "bin" || n == "lib"))?.parent()?;
        if above.file_name().is_some_and(|n| n == "jre") {
            above.parent()
        } else {
            Some(above)
        }
    })?;
    let dir = home.file_name()?.to_str()?.to_ascii_lowercase();
    let major = match &released {
        // `1.8.0_392` is Java 8; `17.0.15` is Java 17.
        Some((_, v)) => {
            let mut parts = v.split('.');
            match parts.next()? {
                "1" => parts.next()?.to_owned(),
                major => major.to_owned(),
            }
        }
        None => first_number(&dir)?.split('.').next()?.to_owned(),
    };
    const BUILDS: &[(&str, &str)] = &[
        ("temurin", "Temurin"),
        ("zulu", "Zulu"),
        ("corretto", "Corretto"),
        ("graalvm", "GraalVM"),
        ("openjdk", "OpenJDK"),
    ];
    let build = BUILDS.iter().find(|(key, _)| dir.contains(key)).map_or("Java", |(_, name)| name);
    Some(format!("{build} {major}"))
}

/// PyPy's version: `-v7.3.17` in a path, else the `ppXY` tag of an extension module's name,
/// mapped or in its standard library's directory.
fn pypy_version<'a>(
    exe: &Path,
    library: Option<&Path>,
    mapped: impl Iterator<Item = &'a str>,
    root: &Path,
) -> Option<String> {
    let in_path = |p: &Path| {
        p.iter().filter_map(|c| c.to_str()).find_map(|dir| {
            let (_, after) = dir.split_once("-v")?;
            first_number(after).filter(|v| v.contains('.'))
        })
    };
    let tag = |name: &str| {
        // `.pypy39-pp73-x86_64-linux-gnu.so`: pp73 is PyPy 7.3.
        let digits = name.split_once("-pp")?.1.split('-').next()?;
        let (major, minor) = digits.split_at_checked(1)?;
        (major.bytes().all(|b| b.is_ascii_digit()) && !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit()))
            .then(|| format!("{major}.{minor}"))
    };
    if let Some(v) = in_path(exe).or_else(|| library.and_then(in_path)) {
        return Some(v);
    }
    let mut mapped = mapped;
    if let Some(v) = mapped.find_map(|path| tag(onefix_model::fmt::file_name(path))) {
        return Some(v);
    }
    // The standard library beside it: Debian's /usr/lib/pypy3.9, a release's lib/pypy3.9.
    let language = std::iter::once(exe)
        .chain(library)
        .find_map(|p| {
            let name = p.file_name()?.to_str()?;
            let after = name.strip_prefix("libpypy").or_else(|| name.strip_prefix("pypy"))?;
            first_number(after)
        })
        .filter(|v| v.contains('.'))?;
    let stdlib = format!("pypy{language}");
    let mut dirs = vec![PathBuf::from("/usr/lib").join(&stdlib)];
    if let Some(top) = library.and_then(Path::parent).and_then(Path::parent) {
        dirs.push(top.join("lib").join(&stdlib));
    }
    dirs.iter().find_map(|dir| {
        let listed = std::fs::read_dir(root.join(dir.strip_prefix("/").unwrap_or(dir))).ok()?;
        listed.flatten().take(2000).find_map(|e| tag(e.file_name().to_str()?))
    })
}

/// A small text file (a JDK's `release` is a few KiB), read to 64 KiB at most.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(64 * 1024).read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A maps line for `path`, as the kernel writes it.
    fn maps(paths: &[&str]) -> String {
        paths
            .iter()
            .enumerate()
            .map(|(i, p)| format!("7f00{i:04x}000-7f00{i:04x}fff r-xp 00000000 08:01 {} {p}\n", 1000 + i))
            .collect::<String>()
            + "7ffd0000000-7ffd0021000 rw-p 00000000 00:00 0                          [stack]\n"
    }

    fn of(exe: &str, paths: &[&str]) -> Option<Found> {
        let text = maps(paths);
        recognise(Path::new(exe), mapped_files(&text), Path::new("/nonexistent-root"))
    }

    fn called(found: Option<Found>) -> Option<String> {
        found.map(|f| f.called())
    }

    #[test]
    fn each_runtime_is_recognised_from_its_maps_with_its_version() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        // PyPy from a release archive: the version is in the path.
        assert_eq!(
            called(of(
                "/opt/pypy3.10-v7.3.17-linux64/bin/pypy3.10",
                &["/opt/pypy3.10-v7.3.17-linux64/bin/libpypy3.10-c.so", libc]
            )),
            Some("PyPy 7.3.17".into())
        );
        // Debian's PyPy: the ABI tag of a mapped extension module.
        assert_eq!(
            called(of(
                "/usr/bin/pypy3.9",
                &[
                    "/usr/lib/x86_64-linux-gnu/libpypy3.9-c.so",
                    "/usr/lib/pypy3.9/_cffi_backend.pypy39-pp73-x86_64-linux-gnu.so"
                ]
            )),
            Some("PyPy 7.3".into())
        );
        // Node.js by nvm's path; a distribution's node by its libnode's ABI.
        assert_eq!(called(of("/home/u/.nvm/versions/node/v20.11.0/bin/node", &[libc])), Some("Node.js 20.11.0".into()));
        assert_eq!(
            called(of("/usr/bin/node", &["/usr/lib/x86_64-linux-gnu/libnode.so.108", libc])),
            Some("Node.js 18".into())
        );
        assert_eq!(called(of("/usr/bin/node", &[libc])), Some("Node.js".into()));
        // The JVM by its libjvm, whatever launched it, with the JDK's directory.
        let jvm = of(
            "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
            &["/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so", libc],
        );
        assert_eq!(called(jvm), Some("the JVM (OpenJDK 17)".into()));
        assert_eq!(
            called(of("/opt/app/launcher", &["/usr/lib/jvm/temurin-21-jdk-amd64/lib/server/libjvm.so"])),
            Some("the JVM (Temurin 21)".into())
        );
        // .NET: a published app's own host loads libcoreclr from the shared runtime.
        let dotnet = of("/srv/api/Api", &["/usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.1/libcoreclr.so", libc]);
        assert_eq!(dotnet.as_ref().map(|f| f.executable.as_str()), Some("Api"));
        assert_eq!(called(dotnet), Some(".NET 8.0.1".into()));
        // Ruby, PHP, Perl by their executables (and PHP inside Apache by its module).
        assert_eq!(
            called(of("/usr/bin/ruby3.1", &["/usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2"])),
            Some("Ruby 3.1".into())
        );
        assert_eq!(called(of("/usr/sbin/php-fpm8.2", &[libc])), Some("PHP 8.2".into()));
        assert_eq!(called(of("/usr/sbin/apache2", &["/usr/lib/apache2/modules/libphp8.2.so"])), Some("PHP 8.2".into()));
        assert_eq!(called(of("/usr/bin/perl", &["/usr/lib/x86_64-linux-gnu/libperl.so.5.36.0"])), Some("Perl".into()));
        assert_eq!(
            called(of("/usr/lib/erlang/erts-13.1.5/bin/beam.smp", &[libc])),
            Some("the Erlang VM (erts 13.1.5)".into())
        );
    }

    #[test]
    fn cpython_native_programs_and_embedders_are_not_runtimes_of_the_table() {
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        assert_eq!(of("/usr/bin/python3.11", &[libc]), None);
        assert_eq!(of("/srv/api/server", &[libc, "/usr/lib/x86_64-linux-gnu/libssl.so.3"]), None);
        // A CPython that drives a JVM (JPype) is read as CPython.
        assert_eq!(of("/usr/bin/python3.11", &["/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so"]), None);
        assert_eq!(of("/usr/bin/uwsgi", &["/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"]), None);
        // An editor that embeds Perl and Ruby for its plugins stays a native program.
        assert_eq!(
            of("/usr/bin/vim.basic", &["/usr/lib/x86_64-linux-gnu/libperl.so.5.36", "/usr/lib/libruby-3.1.so.3.1"]),
            None
        );
        // Names that only begin like a runtime's.
        assert_eq!(of("/usr/local/bin/nodemon", &[libc]), None);
        assert_eq!(of("/usr/bin/javac-helper", &[libc]), None);
    }

    #[test]
    fn the_sentence_names_the_runtime_and_what_to_use_meanwhile() {
        let node = of("/usr/bin/node", &[]).unwrap().to_string();
        assert_eq!(
            node,
            "onefix reads CPython and native programs; this is Node.js (node): its JavaScript frames cannot be read yet; meanwhile use `node --cpu-prof` (or 0x, or clinic flame)"
        );
        let jvm = of("/usr/lib/jvm/java-17-openjdk-amd64/bin/java", &[]).unwrap().to_string();
        assert!(jvm.contains("the JVM (OpenJDK 17) (java)") && jvm.contains("async-profiler"), "{jvm}");
        for runtime in RUNTIMES {
            let sentence = Found { runtime, version: None, executable: "x".into() }.to_string();
            assert!(!sentence.contains("-g") && !sentence.contains("--user-code"), "{sentence}");
            assert!(!sentence.contains(". "), "one sentence: {sentence}");
        }
    }

    #[test]
    fn a_jdk_s_release_file_gives_its_version() {
        let root = std::env::temp_dir().join(format!("onefix-runtime-test-{}", std::process::id()));
        let home = root.join("opt/java/openjdk");
        std::fs::create_dir_all(home.join("lib/server")).unwrap();
        std::fs::write(home.join("release"), "IMPLEMENTOR=\"Eclipse Adoptium\"\nJAVA_VERSION=\"21.0.2\"\n").unwrap();
        let text = maps(&["/opt/java/openjdk/lib/server/libjvm.so"]);
        let found = recognise(Path::new("/opt/java/openjdk/bin/java"), mapped_files(&text), &root);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(called(found), Some("the JVM (OpenJDK 21)".into()));
    }

    #[test]
    fn maps_paths_are_read_whole_each_once() {
        let text = "00400000-00452000 r-xp 00000000 08:02 173521      /srv/my app/bin/server\n\
                    00651000-00652000 r--p 00051000 08:02 173521      /srv/my app/bin/server\n\
                    7f00-7f01 r-xp 00000000 08:02 1 /tmp/libfoo.so (deleted)\n\
                    7ffd-7ffe rw-p 00000000 00:00 0 [heap]\n";
        assert_eq!(mapped_files(text).collect::<Vec<_>>(), vec!["/srv/my app/bin/server", "/tmp/libfoo.so"]);
    }
}
