//! What a run's model would take in memory, checked against the machine before any of it
//! is allocated: a flag (`--topics 10000000`, `--factors 1000000`) or a vocabulary read
//! from a file that would need more memory than there is ends in an error naming the flag
//! and the sizes, not in an allocation failure that aborts the process.
//!
//! The model is held several times over (on the store's shards, in the workers' caches,
//! then in the dense snapshot a run returns; an MF model of 11 GiB took more than 24 GiB),
//! so a model may take at most a quarter of the memory this process can have: the
//! machine's (`MemTotal` of `/proc/meminfo`), or its cgroup's limit if lower.

use crate::AppError;

/// The memory one model's dense form takes: `rows × width × bytes_per_value`, described.
#[derive(Debug, Clone)]
pub struct Footprint {
    /// What the model is, e.g. `the word-topic table`.
    pub what: &'static str,
    /// How many rows it has, and what a row is (e.g. `words`).
    pub rows: (u64, &'static str),
    /// How wide a row is, and what a column is (e.g. `topics`).
    pub width: (u64, &'static str),
    /// Bytes per value.
    pub value_bytes: u64,
    /// The flag that sets the width and its value (e.g. `--topics`, 100), named in the
    /// error.
    pub flag: (&'static str, u64),
}

impl Footprint {
    /// Its size in bytes (saturating at `u128::MAX`).
    pub fn bytes(&self) -> u128 {
        (u128::from(self.rows.0) * u128::from(self.width.0))
            .saturating_mul(u128::from(self.value_bytes))
    }

    /// Ok if it fits in a quarter of `memory` bytes; else an error naming the flag and sizes.
    pub fn check_against(&self, memory: u64) -> Result<(), AppError> {
        let bytes = self.bytes();
        if bytes <= u128::from(memory / 4) {
            return Ok(());
        }
        Err(AppError::Invalid(format!(
            "{} {}: {} would take {} ({} {} x {} {} x {} bytes), more than a quarter of the {} of memory here (the store's shards, the workers' caches and the run's snapshot each hold a copy)",
            self.flag.0,
            self.flag.1,
            self.what,
            gib(bytes),
            self.rows.0,
            self.rows.1,
            self.width.0,
            self.width.1,
            self.value_bytes,
            gib(u128::from(memory)),
        )))
    }

    /// [`Footprint::check_against`] this machine's memory ([`memory_bytes`]); a machine
    /// whose memory cannot be read is not checked.
    pub fn check(&self) -> Result<(), AppError> {
        match memory_bytes() {
            Some(memory) => self.check_against(memory),
            None => Ok(()),
        }
    }
}

/// `bytes` in GiB, for messages.
fn gib(bytes: u128) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// The memory this process can have: the machine's, or its cgroup's limit if lower;
/// `None` where neither can be read (not Linux).
pub fn memory_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| mem_total(&text));
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .filter_map(|text| text.trim().parse::<u64>().ok())
    .min();
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line["MemTotal:".len()..].split_whitespace();
    let kib: u64 = parts.next()?.parse().ok()?;
    (parts.next() == Some("kB")).then(|| kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topics(k: u64) -> Footprint {
        Footprint {
            what: "the word-topic table",
            rows: (1000, "words"),
            width: (k, "topics"),
            value_bytes: 4,
            flag: ("--topics", k),
        }
    }

    #[test]
    fn a_model_over_a_quarter_of_the_memory_is_refused_naming_the_flag_and_sizes() {
        let gib = 1u64 << 30;
        topics(100).check_against(gib).unwrap();
        // 1000 x 10M x 4 = 40 GB.
        let err = topics(10_000_000)
            .check_against(24 * gib)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--topics 10000000: the word-topic table"),
            "{err}"
        );
        assert!(
            err.contains("1000 words x 10000000 topics x 4 bytes"),
            "{err}"
        );
        assert!(err.contains("24.0 GiB"), "{err}");
        // Exactly a quarter fits; one value more does not.
        let limit = topics(1).bytes() as u64 * 4;
        topics(1).check_against(limit).unwrap();
        topics(1).check_against(limit - 4).unwrap_err();
        // No overflow at the extremes.
        let huge = Footprint {
            rows: (u64::MAX, "rows"),
            width: (u64::MAX, "columns"),
            ..topics(1)
        };
        huge.check_against(u64::MAX).unwrap_err();
    }

    #[test]
    fn meminfo_is_parsed_and_this_machine_has_some() {
        assert_eq!(
            mem_total("MemFree: 1 kB\nMemTotal:  2048 kB\n"),
            Some(2 << 20)
        );
        assert_eq!(mem_total("MemTotal: 2048\n"), None);
        assert!(memory_bytes().is_some_and(|m| m > 0));
    }
}
