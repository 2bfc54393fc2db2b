//! The process's resident memory (RSS), as the kernel reports it in `/proc/self/status`:
//! the current resident set (`VmRSS`) and its high-water mark (`VmHWM`). Linux only; both
//! are `None` where the file or field cannot be read. This module knows nothing of what
//! the memory holds (`iterstore::stats::SpecialMemory` does).

/// Bytes resident now.
pub fn resident_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|k| k * 1024)
}

/// The most bytes this process has had resident so far.
pub fn peak_resident_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|k| k * 1024)
}

/// The value (in kB) of the `/proc/self/status` line starting with `field`.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_kib(&status, field)
}

fn parse_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    let mut parts = line[field.len()..].split_whitespace();
    let value = parts.next()?.parse().ok()?;
    (parts.next() == Some("kB")).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_lines_and_rejects_odd_ones() {
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\nVmOdd:\t12 MB\n";
        assert_eq!(parse_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(parse_kib(status, "VmHWM:"), Some(2048));
        assert_eq!(parse_kib(status, "VmOdd:"), None);
        assert_eq!(parse_kib(status, "VmSwap:"), None);
    }

    #[test]
    fn reads_this_process_on_linux() {
        if cfg!(target_os = "linux") {
            let now = resident_bytes().expect("VmRSS");
            let peak = peak_resident_bytes().expect("VmHWM");
            assert!(now > 0 && peak >= now, "{now} {peak}");
        }
    }
}
