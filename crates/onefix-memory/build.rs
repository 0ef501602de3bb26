//! Builds the allocation agent (agent/agent.c) as a shared library in OUT_DIR; the crate embeds
//! it, so that an installed onefix carries its agent.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("onefix-memory-agent.so");
    let source = "agent/agent.c";
    println!("cargo:rerun-if-changed={source}");
    let compiler = cc::Build::new().opt_level(2).pic(true).get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args([
        "-shared",
        "-fPIC",
        "-O2",
        "-g",
        "-fvisibility=hidden",
        "-fno-omit-frame-pointer",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-Wno-unused-parameter",
        "-o",
    ])
    .arg(&out)
    .arg(source)
    .args(["-ldl", "-lm", "-lpthread"]);
    let status = cmd.status().unwrap_or_else(|e| panic!("cannot run the C compiler for the allocation agent: {e}"));
    assert!(status.success(), "the allocation agent (agent/agent.c) did not compile");
}
