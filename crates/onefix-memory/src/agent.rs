//! The embedded agent, and the private file it is preloaded from.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The agent's shared library, built from agent/agent.c.
pub static AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/onefix-memory-agent.so"));

/// The agent written to a directory only this user can read; removed on drop.
pub struct AgentFile {
    dir: PathBuf,
    path: PathBuf,
}

impl AgentFile {
    pub fn write() -> std::io::Result<AgentFile> {
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let dir = base.join(format!("onefix-agent-{}-{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    let path = dir.join("libonefix-memory-agent.so");
                    let written = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o500)
                        .open(&path)
                        .and_then(|mut f| f.write_all(AGENT));
                    if let Err(e) = written {
                        let _ = std::fs::remove_dir_all(&dir);
                        return Err(e);
                    }
                    return Ok(AgentFile { dir, path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, "no free name for the agent's directory"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for AgentFile {
    fn drop(&mut self) {
        // A process that already loaded the library keeps its mapping.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
