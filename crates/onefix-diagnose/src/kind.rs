//! The kinds of cost a finding names: the vocabulary of the JSON contract's `kind`, checked
//! when the knowledge base loads (a misspelled kind in a `kb/*.toml` entry is an error there,
//! not a silent new kind in reports).

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    RepeatedSetup,
    NewConnectionPerRequest,
    SerialIo,
    Serialization,
    NPlusOneQuery,
    DeepCopy,
    Hashing,
    GcPressure,
    LockContention,
    BlockingWait,
    HotLoopCompute,
    HotCall,
    Logging,
    Filesystem,
    RegexMatching,
    RepeatedWalk,
    Quadratic,
    Idle,
    MemoryRetention,
    MemoryPeak,
    AllocationChurn,
}

impl Kind {
    pub const ALL: [Kind; 21] = [
        Kind::RepeatedSetup,
        Kind::NewConnectionPerRequest,
        Kind::SerialIo,
        Kind::Serialization,
        Kind::NPlusOneQuery,
        Kind::DeepCopy,
        Kind::Hashing,
        Kind::GcPressure,
        Kind::LockContention,
        Kind::BlockingWait,
        Kind::HotLoopCompute,
        Kind::HotCall,
        Kind::Logging,
        Kind::Filesystem,
        Kind::RegexMatching,
        Kind::RepeatedWalk,
        Kind::Quadratic,
        Kind::Idle,
        Kind::MemoryRetention,
        Kind::MemoryPeak,
        Kind::AllocationChurn,
    ];

    /// As the JSON report and the knowledge base spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::RepeatedSetup => "repeated-setup",
            Kind::NewConnectionPerRequest => "new-connection-per-request",
            Kind::SerialIo => "serial-io",
            Kind::Serialization => "serialization",
            Kind::NPlusOneQuery => "n-plus-one-query",
            Kind::DeepCopy => "deep-copy",
            Kind::Hashing => "hashing",
            Kind::GcPressure => "gc-pressure",
            Kind::LockContention => "lock-contention",
            Kind::BlockingWait => "blocking-wait",
            Kind::HotLoopCompute => "hot-loop-compute",
            Kind::HotCall => "hot-call",
            Kind::Logging => "logging",
            Kind::Filesystem => "filesystem",
            Kind::RegexMatching => "regex-matching",
            Kind::RepeatedWalk => "repeated-walk",
            Kind::Quadratic => "quadratic",
            Kind::Idle => "idle",
            Kind::MemoryRetention => "memory-retention",
            Kind::MemoryPeak => "memory-peak",
            Kind::AllocationChurn => "allocation-churn",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Kind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Kind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_from_its_spelling_and_a_misspelling_is_refused() {
        #[derive(Deserialize)]
        struct One {
            kind: Kind,
        }
        for k in Kind::ALL {
            let one: One = toml::from_str(&format!("kind = '{}'", k.as_str())).unwrap();
            assert_eq!(one.kind, k);
        }
        let err = toml::from_str::<One>("kind = 'repeated-set-up'").err().unwrap().to_string();
        assert!(err.contains("unknown variant") && err.contains("repeated-setup"), "{err}");
    }
}
